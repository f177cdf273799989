package bpf

import (
	"fmt"
	"net"
	"strings"
)

// AttachUnbound attaches the program to the host-side interface ifindex
// with no configuration: the interface has no identity (no address, no
// sandbox id), so the program drops every packet from it (reason
// unconfigured-interface, counted as sandbox 0) before parsing it. A warm pool member
// waits like this until it is claimed; a later Attach of the same
// interface binds it, in one map write. name is only for the log.
func (p *Path) AttachUnbound(ifindex int, name string) (Handle, error) {
	iface, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return Handle{}, fmt.Errorf("bpf: attach unbound %s: interface %d: %w", name, ifindex, err)
	}
	if !strings.HasPrefix(iface.Name, p.opts.Guard.IfacePrefix) {
		return Handle{}, fmt.Errorf("bpf: attach unbound %s: interface %q lacks the guarded prefix %q",
			name, iface.Name, p.opts.Guard.IfacePrefix)
	}
	if err := guardIface(p.opts.ProcSys, iface.Name); err != nil {
		return Handle{}, fmt.Errorf("bpf: attach unbound %s: %w", name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.deleteConfig(uint32(ifindex)); err != nil { // a reused index's stale identity
		return Handle{}, fmt.Errorf("bpf: attach unbound %s: clear config: %w", name, err)
	}
	id, err := p.attachLink(ifindex)
	if err != nil {
		return Handle{}, fmt.Errorf("bpf: attach unbound %s to %s: %w", name, iface.Name, err)
	}
	p.log.Info("bpf: attached unbound", "sandbox", name, "iface", iface.Name, "link", id)
	return Handle{Ifindex: ifindex, LinkID: id}, nil
}
