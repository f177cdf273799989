package main

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ip"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"airlock/client"
)

// errAgentRefused is the plugin-specific CNI error code (100 and up are
// the plugin's) for a pod the node agent refused: unknown policy, an
// address outside the node's pool, an attach that failed.
const errAgentRefused uint = 100

// errPluginNotAvailable is CNI 1.1's STATUS code: the plugin cannot
// take ADDs now.
const errPluginNotAvailable uint = 50

// podIf is what ADD learned of the pod's interface.
type podIf struct {
	addr, gateway net.IP
	mac, hostIf   string
}

func cmdAdd(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	if conf.PrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig,
			"airlock-cni must be chained after a main plugin such as ptp or bridge", "no prevResult")
	}
	res, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "airlock-cni: convert prevResult", err.Error())
	}
	pa, err := parseArgs(args.Args)
	if err != nil {
		return err
	}
	pi, err := inspectPod(res, args)
	if err != nil {
		return err
	}
	req := client.PodAttachRequest{ContainerID: args.ContainerID, IfName: args.IfName, Netns: args.Netns,
		HostIf: pi.hostIf, Address: pi.addr.String(), MAC: pi.mac, Policy: conf.policy(pa),
		Namespace: string(pa.K8S_POD_NAMESPACE), Name: string(pa.K8S_POD_NAME)}
	if pi.gateway != nil {
		req.Gateway = pi.gateway.String()
	}
	ctx, cancel := conf.context()
	defer cancel()
	p, err := client.New(conf.Socket).AttachPod(ctx, req)
	if err != nil {
		id := client.PodID(args.ContainerID, args.IfName)
		return failClosed(agentError("ADD", conf.Socket, err), pi.hostIf, client.PodIfName(id))
	}
	renameHost(res, pi.hostIf, p.HostIf)
	return types.PrintResult(res, conf.CNIVersion)
}

func (c *netConf) context() (context.Context, context.CancelFunc) {
	d, _ := c.timeout() // checked in parseConf
	return context.WithTimeout(context.Background(), d)
}

// failClosed deletes the host end of the pod's veth (and so the pair),
// under the main plugin's name or the one the agent may already have
// given it: whatever the runtime does next, the pod has no network.
func failClosed(cause error, names ...string) error {
	for _, name := range names {
		if err := ip.DelLinkByName(name); err != nil && !errors.Is(err, ip.ErrLinkNotFound) {
			return types.NewError(types.ErrInternal, cause.Error(), "and deleting the pod's veth "+name+" failed too: "+err.Error())
		}
	}
	return cause
}

// agentError turns an agent failure into a CNI error: unreachable or
// unavailable means "try again later" (11), a refusal is code 100.
func agentError(verb, socket string, err error) error {
	var ae *client.Error
	if !errors.As(err, &ae) {
		return types.NewError(types.ErrTryAgainLater,
			fmt.Sprintf("airlock-cni %s: the Airlock node agent is not reachable at %s (is `airlock serve --node` running?)", verb, socket),
			err.Error())
	}
	if ae.Code == client.CodeUnavailable {
		return types.NewError(types.ErrTryAgainLater, "airlock-cni "+verb+": the node agent is not ready", ae.Message)
	}
	return types.NewError(errAgentRefused, "airlock-cni "+verb+": the node agent refused the pod: "+ae.Message, ae.Code)
}

// inspectPod finds the pod's interface and its one IPv4 address in the
// main plugin's result, and the host end of its veth through the netns.
func inspectPod(res *current.Result, args *skel.CmdArgs) (podIf, error) {
	var pi podIf
	idx := -1
	for i, ifc := range res.Interfaces {
		if ifc.Name == args.IfName && ifc.Sandbox != "" {
			idx, pi.mac = i, ifc.Mac
		}
	}
	if idx < 0 {
		return pi, types.NewError(types.ErrInvalidNetworkConfig, "airlock-cni: prevResult has no interface "+args.IfName+" in the pod", "")
	}
	for _, ipc := range res.IPs {
		if ipc.Interface != nil && *ipc.Interface != idx {
			continue
		}
		if ipc.Address.IP.To4() == nil {
			return pi, types.NewError(types.ErrInvalidNetworkConfig,
				"airlock-cni steers IPv4 only: remove the IPv6 range from the main plugin's IPAM", ipc.Address.String())
		}
		if pi.addr != nil {
			return pi, types.NewError(types.ErrInvalidNetworkConfig,
				"airlock-cni: the pod has more than one IPv4 address; give it one (its identity)", ipc.Address.String())
		}
		pi.addr, pi.gateway = ipc.Address.IP.To4(), ipc.Gateway
	}
	if pi.addr == nil {
		return pi, types.NewError(types.ErrInvalidNetworkConfig, "airlock-cni: prevResult gives the pod no IPv4 address", "")
	}
	host, err := hostPeer(args.Netns, args.IfName)
	if err != nil {
		return pi, types.NewError(types.ErrInvalidNetNS, "airlock-cni: find the host end of "+args.IfName, err.Error())
	}
	pi.hostIf = host
	return pi, nil
}

// hostPeer returns the host-side name of the veth whose pod end is ifName
// in the netns at path.
func hostPeer(path, ifName string) (string, error) {
	var peer int
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		_, idx, err := ip.GetVethPeerIfindex(ifName)
		peer = idx
		return err
	})
	if err != nil {
		return "", err
	}
	l, err := netlink.LinkByIndex(peer)
	if err != nil {
		return "", fmt.Errorf("peer index %d: %w", peer, err)
	}
	if l.Type() != "veth" {
		return "", fmt.Errorf("the peer %s of %s is a %s, not a veth", l.Attrs().Name, ifName, l.Type())
	}
	return l.Attrs().Name, nil
}

// renameHost records the agent's guarded name of the host veth in the
// result handed to the next plugin and the runtime.
func renameHost(res *current.Result, old, name string) {
	for _, ifc := range res.Interfaces {
		if ifc.Sandbox == "" && ifc.Name == old {
			ifc.Name = name
		}
	}
}
