package tproxy

import (
	"context"
	"net"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func sockopts(t *testing.T, c syscall.Conn, opts ...[2]int) []int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int, len(opts))
	if err := rc.Control(func(fd uintptr) {
		for i, o := range opts {
			v, err := unix.GetsockoptInt(int(fd), o[0], o[1])
			if err != nil {
				t.Errorf("getsockopt %v: %v", o, err)
			}
			out[i] = v
		}
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	transparent = [2]int{unix.SOL_IP, unix.IP_TRANSPARENT}
	protocol    = [2]int{unix.SOL_SOCKET, unix.SO_PROTOCOL}
	pktinfo     = [2]int{unix.SOL_IP, unix.IP_PKTINFO}
	origDst     = [2]int{unix.SOL_IP, unix.IP_RECVORIGDSTADDR}
	reuseAddr   = [2]int{unix.SOL_SOCKET, unix.SO_REUSEADDR}
)

// A TCP listener is transparent plain TCP (the SOCKMAP refuses MPTCP), and
// an accepted connection's local address is the address it was sent to.
func TestListenTCP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("IP_TRANSPARENT needs CAP_NET_ADMIN: not root")
	}
	ln, err := ListenTCP(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := sockopts(t, ln, transparent, protocol, reuseAddr); got[0] != 1 || got[1] != unix.IPPROTO_TCP || got[2] != 1 {
		t.Errorf("IP_TRANSPARENT %d, protocol %d, SO_REUSEADDR %d; want 1, plain TCP (%d), 1", got[0], got[1], got[2], unix.IPPROTO_TCP)
	}
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.LocalAddr().String() != ln.Addr().String() {
		t.Errorf("local address %v, want %v", c.LocalAddr(), ln.Addr())
	}
}

// A UDP socket is transparent, reports each datagram's destination and
// has SO_REUSEADDR (as dnsd's sockets always had; TCP listeners get it
// from Go).
func TestListenUDP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("IP_TRANSPARENT needs CAP_NET_ADMIN: not root")
	}
	pc, err := ListenUDP(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if got := sockopts(t, pc, transparent, pktinfo, origDst, reuseAddr); got[0] != 1 || got[1] != 1 || got[2] != 1 || got[3] != 1 {
		t.Errorf("IP_TRANSPARENT, IP_PKTINFO, IP_RECVORIGDSTADDR, SO_REUSEADDR = %v, want all 1", got)
	}
}

// Without CAP_NET_ADMIN the listener is refused with the option named,
// never opened without IP_TRANSPARENT.
func TestListenWithoutPrivilegeFails(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("runs as root: IP_TRANSPARENT is allowed")
	}
	if _, err := ListenTCP(context.Background(), "127.0.0.1:0"); err == nil {
		t.Fatal("transparent listener opened without CAP_NET_ADMIN")
	}
}
