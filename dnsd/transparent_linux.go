package dnsd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// ListenTransparentUDP opens the UDP socket the bpf path assigns sandbox
// queries to, whatever resolver address they were sent to: bound to addr
// (the gateway's port 53) with IP_TRANSPARENT, IP_PKTINFO and
// IP_RECVORIGDSTADDR, so ServePacketConn answers from the address each query
// was sent to. Needs CAP_NET_ADMIN.
func ListenTransparentUDP(addr string) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: transparent(true)}
	pc, err := lc.ListenPacket(context.Background(), "udp4", addr)
	if err != nil {
		return nil, fmt.Errorf("dnsd: transparent udp %s: %w", addr, err)
	}
	return pc.(*net.UDPConn), nil
}

// ListenTransparentTCP opens the TCP/53 listener for the bpf path: plain TCP
// (not MPTCP, which a SOCKMAP refuses) with IP_TRANSPARENT, so accepted
// connections carry the original destination as their local address.
func ListenTransparentTCP(addr string) (*net.TCPListener, error) {
	lc := net.ListenConfig{Control: transparent(false)}
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp4", addr)
	if err != nil {
		return nil, fmt.Errorf("dnsd: transparent tcp %s: %w", addr, err)
	}
	return ln.(*net.TCPListener), nil
}

func transparent(udp bool) func(string, string, syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			set := func(level, opt int) {
				serr = errors.Join(serr, unix.SetsockoptInt(int(fd), level, opt, 1))
			}
			set(unix.SOL_SOCKET, unix.SO_REUSEADDR)
			set(unix.SOL_IP, unix.IP_TRANSPARENT)
			if udp {
				set(unix.SOL_IP, unix.IP_PKTINFO)
				set(unix.SOL_IP, unix.IP_RECVORIGDSTADDR)
			}
		})
		return errors.Join(err, serr)
	}
}
