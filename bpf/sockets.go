package bpf

import (
	"context"
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
// ListenConfig. When l is closed the kernel drops it from the SOCKMAP and
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
			opErr = fmt.Errorf("socket is MPTCP; SOCKMAP needs plain TCP (use bpf.ListenConfig or SetMultipathTCP(false))")
			return
		}
		if v, err := unix.GetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT); err != nil || v == 0 {
			opErr = fmt.Errorf("socket lacks IP_TRANSPARENT (use bpf.ListenConfig)")
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

// ListenConfig returns a net.ListenConfig for sockets the path can steer to:
// IP_TRANSPARENT (needs CAP_NET_ADMIN), plain TCP (not MPTCP), and for UDP
// IP_PKTINFO and IP_RECVORIGDSTADDR so the original destination is known.
func ListenConfig() *net.ListenConfig {
	// KeepAlive -1: accepted sockets get no TCP keep-alive options (four
	// setsockopt calls per connection); the proxy's and dnsd's idle
	// timeouts close connections whose peer went away.
	lc := &net.ListenConfig{Control: transparentControl, KeepAlive: -1}
	lc.SetMultipathTCP(false)
	return lc
}

func transparentControl(network, _ string, c syscall.RawConn) error {
	var opErr error
	err := c.Control(func(fd uintptr) {
		s := int(fd)
		opErr = unix.SetsockoptInt(s, unix.SOL_IP, unix.IP_TRANSPARENT, 1)
		if opErr != nil {
			opErr = fmt.Errorf("set IP_TRANSPARENT: %w", opErr)
			return
		}
		if network == "udp" || network == "udp4" {
			opErr = errors.Join(
				unix.SetsockoptInt(s, unix.SOL_IP, unix.IP_PKTINFO, 1),
				unix.SetsockoptInt(s, unix.SOL_IP, unix.IP_RECVORIGDSTADDR, 1))
		}
	})
	return errors.Join(err, opErr)
}

// ListenTCP is ListenConfig().Listen for a TCP address ("tcp4").
func ListenTCP(ctx context.Context, addr string) (*net.TCPListener, error) {
	l, err := ListenConfig().Listen(ctx, "tcp4", addr)
	if err != nil {
		return nil, err
	}
	return l.(*net.TCPListener), nil
}

// ListenUDP is ListenConfig().ListenPacket for a UDP address ("udp4").
func ListenUDP(ctx context.Context, addr string) (*net.UDPConn, error) {
	c, err := ListenConfig().ListenPacket(ctx, "udp4", addr)
	if err != nil {
		return nil, err
	}
	return c.(*net.UDPConn), nil
}
