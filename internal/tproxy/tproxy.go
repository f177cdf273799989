// Package tproxy opens the sockets the kernel path steers sandbox traffic
// to: the one place a transparent listener is made. Every socket it opens
// has IP_TRANSPARENT (needs CAP_NET_ADMIN), so it accepts traffic for any
// destination and an accepted connection's local address is the original
// destination; TCP sockets are plain TCP, not MPTCP (a SOCKMAP refuses
// MPTCP sockets); UDP sockets also get IP_PKTINFO and IP_RECVORIGDSTADDR,
// so a reader learns each datagram's original destination and can answer
// from it, and SO_REUSEADDR, which Go sets on TCP listeners only (dnsd's
// own opener set it, so a restarted appliance binds its DNS port as before). bpf.(*Path).SetSockets checks this contract when a socket is
// put into the SOCKMAP.
package tproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// ListenConfig returns the net.ListenConfig of a transparent socket.
func ListenConfig() *net.ListenConfig {
	// KeepAlive -1: accepted sockets get no TCP keep-alive options (four
	// setsockopt calls per connection); the proxy's and dnsd's idle
	// timeouts close connections whose peer went away.
	lc := &net.ListenConfig{Control: control, KeepAlive: -1}
	lc.SetMultipathTCP(false)
	return lc
}

// ListenTCP opens a transparent TCP listener on addr ("tcp4").
func ListenTCP(ctx context.Context, addr string) (*net.TCPListener, error) {
	l, err := ListenConfig().Listen(ctx, "tcp4", addr)
	if err != nil {
		return nil, fmt.Errorf("transparent tcp %s: %w", addr, err)
	}
	return l.(*net.TCPListener), nil
}

// ListenUDP opens a transparent UDP socket on addr ("udp4").
func ListenUDP(ctx context.Context, addr string) (*net.UDPConn, error) {
	c, err := ListenConfig().ListenPacket(ctx, "udp4", addr)
	if err != nil {
		return nil, fmt.Errorf("transparent udp %s: %w", addr, err)
	}
	return c.(*net.UDPConn), nil
}

func control(network, _ string, c syscall.RawConn) error {
	var opErr error
	err := c.Control(func(fd uintptr) {
		s := int(fd)
		if err := unix.SetsockoptInt(s, unix.SOL_IP, unix.IP_TRANSPARENT, 1); err != nil {
			opErr = fmt.Errorf("set IP_TRANSPARENT: %w", err)
			return
		}
		if network == "udp" || network == "udp4" {
			if err := errors.Join(
				unix.SetsockoptInt(s, unix.SOL_IP, unix.IP_PKTINFO, 1),
				unix.SetsockoptInt(s, unix.SOL_IP, unix.IP_RECVORIGDSTADDR, 1),
				unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)); err != nil {
				opErr = fmt.Errorf("set IP_PKTINFO, IP_RECVORIGDSTADDR, SO_REUSEADDR: %w", err)
			}
		}
	})
	return errors.Join(err, opErr)
}
