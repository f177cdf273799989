package bpf

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Slots of the SOCKMAP (keep in sync with c/steer.c).
const (
	slotProxy    uint32 = 0
	slotDNSUDP   uint32 = 1
	slotDNSTCP   uint32 = 2
	slotExplicit uint32 = 3
)

// SetProxyListener makes l the target of every steered TCP flow (except
// DNS). l must be IPv4, IP_TRANSPARENT and not MPTCP: create it with
// internal/tproxy. When l is closed the kernel drops it from the SOCKMAP and
// new flows are dropped until another listener is set.
func (p *Path) SetProxyListener(l *net.TCPListener) error {
	return p.setSocket(slotProxy, "proxy listener", l)
}

// SetExplicitProxyListener makes l the target of TCP to the gateway's
// ProxyPort (the explicit HTTP_PROXY listener); without it those flows go to
// the transparent listener.
func (p *Path) SetExplicitProxyListener(l *net.TCPListener) error {
	return p.setSocket(slotExplicit, "explicit proxy listener", l)
}

// SetDNSSockets makes udp and tcp the targets of DNS (UDP and TCP to the DNS
// port, any destination). Both must be IP_TRANSPARENT and bound to port 53
// (replies leave from the bound port); udp should also have IP_PKTINFO and
// IP_RECVORIGDSTADDR to learn and answer from the original destination.
// Either may be nil to leave its slot unchanged.
func (p *Path) SetDNSSockets(udp *net.UDPConn, tcp *net.TCPListener) error {
	if udp != nil {
		if err := p.setSocket(slotDNSUDP, "dns udp socket", udp); err != nil {
			return err
		}
	}
	if tcp != nil {
		return p.setSocket(slotDNSTCP, "dns tcp listener", tcp)
	}
	return nil
}

// ClearSockets empties every SOCKMAP slot: all steered traffic is dropped.
func (p *Path) ClearSockets() error {
	var errs []error
	for _, s := range []uint32{slotProxy, slotDNSUDP, slotDNSTCP, slotExplicit} {
		if err := p.objs.AlkSockets.Delete(s); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (p *Path) setSocket(slot uint32, what string, c syscall.Conn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("bpf: %s: %w", what, err)
	}
	var opErr error
	err = rc.Control(func(fd uintptr) {
		if proto, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PROTOCOL); err == nil && proto == unix.IPPROTO_MPTCP {
			opErr = fmt.Errorf("socket is MPTCP; SOCKMAP needs plain TCP (open it with internal/tproxy)")
			return
		}
		if v, err := unix.GetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT); err != nil || v == 0 {
			opErr = fmt.Errorf("socket lacks IP_TRANSPARENT (open it with internal/tproxy)")
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		opErr = p.objs.AlkSockets.Update(slot, uint64(fd), ebpf.UpdateAny)
	})
	if err == nil {
		err = opErr
	}
	if err != nil {
		return fmt.Errorf("bpf: put %s into the sockmap: %w", what, err)
	}
	return nil
}
