package main

import (
	"encoding/json"
	"errors"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"airlock/client"
)

// cmdDel detaches and forgets the pod. It is idempotent: an unknown pod
// is no error, and neither is an agent that is not running (a node agent
// forgets, when it starts, every pod whose veth is gone, and the main
// plugin's DEL that follows deletes the veth).
func cmdDel(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	ctx, cancel := conf.context()
	defer cancel()
	err = client.New(conf.Socket).DetachPod(ctx, client.PodID(args.ContainerID, args.IfName))
	var ae *client.Error
	if err == nil || !errors.As(err, &ae) {
		return nil
	}
	return agentError("DEL", conf.Socket, err)
}

// cmdCheck verifies the attachment: the agent holds it, its path is
// attached, and the address is the one prevResult gives the pod.
func cmdCheck(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	if conf.PrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "airlock-cni CHECK needs prevResult", "")
	}
	res, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "airlock-cni: convert prevResult", err.Error())
	}
	ctx, cancel := conf.context()
	defer cancel()
	p, err := client.New(conf.Socket).CheckPod(ctx, client.PodID(args.ContainerID, args.IfName))
	if err != nil {
		return agentError("CHECK", conf.Socket, err)
	}
	for _, ipc := range res.IPs {
		if ipc.Address.IP.To4() != nil && ipc.Address.IP.String() == p.Address {
			return nil
		}
	}
	return types.NewError(errAgentRefused, "airlock-cni CHECK: the agent holds the pod at "+p.Address+", which prevResult does not give it", "")
}

// gcConf is the GC verb's configuration: the attachments still valid.
type gcConf struct {
	Valid []types.GCAttachment `json:"cni.dev/valid-attachments"`
}

// cmdGC detaches every pod of this node the runtime no longer has.
func cmdGC(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	var gc gcConf
	if err := json.Unmarshal(args.StdinData, &gc); err != nil {
		return types.NewError(types.ErrDecodingFailure, "airlock-cni GC: cni.dev/valid-attachments", err.Error())
	}
	req := client.PodGCRequest{Valid: []client.PodKey{}}
	for _, a := range gc.Valid {
		req.Valid = append(req.Valid, client.PodKey{ContainerID: a.ContainerID, IfName: a.IfName})
	}
	ctx, cancel := conf.context()
	defer cancel()
	if _, err := client.New(conf.Socket).GCPods(ctx, req); err != nil {
		return agentError("GC", conf.Socket, err)
	}
	return nil
}

// cmdStatus reports whether the node agent can take pods: code 50 when
// it is not running, not a node agent, or not ready.
func cmdStatus(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	ctx, cancel := conf.context()
	defer cancel()
	st, err := client.New(conf.Socket).NodeStatus(ctx)
	switch {
	case err != nil:
		return types.NewError(errPluginNotAvailable, "airlock-cni: the Airlock node agent is not reachable at "+conf.Socket, err.Error())
	case !st.Node:
		return types.NewError(errPluginNotAvailable, "airlock-cni: the appliance at "+conf.Socket+" is not a node agent (airlock serve --node)", st.Reason)
	case !st.Ready:
		return types.NewError(errPluginNotAvailable, "airlock-cni: the node agent is not ready", st.Reason)
	}
	return nil
}
