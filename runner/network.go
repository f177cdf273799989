package runner

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// VethPrefix starts the name of every sandbox veth's host end (the host's
// nft guards match it).
const VethPrefix = "alk-"

// hostNet is the host-side plumbing, as root: netlink in production, a
// recording fake in tests.
type hostNet interface {
	// AddVeth creates the pair, both ends down, the peer with MAC mac, the
	// host end tagged with alias and with forwarding and IPv6 off; it
	// returns the host ifindex.
	AddVeth(host, peer, alias string, mac net.HardwareAddr) (int, error)
	// UpHost gives the host end the gateway address, brings it up and routes
	// the sandbox's /32 to it.
	UpHost(host string, addr, gw netip.Addr) error
	// MoveIn moves peer into the network namespace of pid, renames it eth0,
	// gives it addr/32 and a default route via gw (onlink), and turns IPv6
	// off in that namespace.
	MoveIn(peer string, pid int, addr, gw netip.Addr) error
	// Index returns the ifindex of a host link (ErrNotFound if absent).
	Index(name string) (int, error)
	// DelLink deletes a host link; an absent link is not an error.
	DelLink(name string) error
	// Links returns the host links whose name has prefix, with their alias.
	Links(prefix string) (map[string]string, error)
}

// VethName is the host-side veth name of sandbox id.
func VethName(id string) string { return VethPrefix + shortID(id) }

func peerName(id string) string { return "alp-" + shortID(id) }

// PeerMAC is the MAC of the sandbox end of the veth of the sandbox at
// addr: locally administered unicast 02:a1 and the four address bytes, so
// unique among live sandboxes and the same after a restart (adoption
// pins it again without looking into the sandbox). The kernel path drops
// every frame from the sandbox with another source MAC (spoofed-mac).
func PeerMAC(addr netip.Addr) net.HardwareAddr {
	a := addr.As4()
	return net.HardwareAddr{0x02, 0xa1, a[0], a[1], a[2], a[3]}
}

func shortID(id string) string {
	if len(id) > 10 {
		return id[:10]
	}
	return id
}

// vethAlias tags a veth with the runner instance that owns it.
func (r *Runner) vethAlias(id string) string {
	return "airlock:" + r.cfg.Instance + ":" + id
}

// plumb gives a started sandbox its network: veth, hook, addresses, routes.
// The container's init is only the holding command at this point.
func (r *Runner) plumb(ctx context.Context, sb *sandbox) error {
	if r.pool == nil {
		return nil
	}
	c, err := r.cfg.Engine.Inspect(ctx, sb.info.ContainerID)
	if err != nil {
		return fmt.Errorf("inspect container: %w", err)
	}
	if !c.Running || c.Pid <= 0 {
		return fmt.Errorf("container is not running after start")
	}
	r.mu.Lock()
	sb.initPid = c.Pid
	r.mu.Unlock()
	id, host := sb.info.ID, VethName(sb.info.ID)
	mac := PeerMAC(sb.info.Address)
	idx, err := r.net.AddVeth(host, peerName(id), r.vethAlias(id), mac)
	if err != nil {
		return fmt.Errorf("network: %w", err)
	}
	r.update(sb, func(i *Sandbox) { i.HostIf = host })
	sb.ifindex = idx
	n := SandboxNet{SandboxID: id, Policy: sb.info.Policy, HostIfName: host, HostIfIndex: idx,
		Addr: sb.info.Address, MAC: mac, Gateway: sb.info.Gateway, Unbound: sb.info.phase == phasePooled}
	detach, err := r.cfg.AttachNetwork(idx, n)
	if err != nil {
		return fmt.Errorf("network: attach the path to %s: %w", host, err)
	}
	sb.detach = detach
	if err := r.net.UpHost(host, sb.info.Address, sb.info.Gateway); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	if err := r.net.MoveIn(peerName(id), c.Pid, sb.info.Address, sb.info.Gateway); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	return nil
}
