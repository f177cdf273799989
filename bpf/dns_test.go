package bpf

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"airlock/internal/tproxy"
)

// fakeDNS stands in for dnsd: a transparent UDP socket and TCP listener on
// gw:53 that answer "dns <original destination>" from the original
// destination, as dnsd does.
type fakeDNS struct {
	udp *net.UDPConn
	tcp *net.TCPListener
}

func startFakeDNS(t testing.TB, gw netip.Addr) *fakeDNS {
	t.Helper()
	ctx := context.Background()
	addr := netip.AddrPortFrom(gw, 53).String()
	u, err := tproxy.ListenUDP(ctx, addr)
	if err != nil {
		t.Fatalf("fake dnsd udp on %s: %v", addr, err)
	}
	l, err := tproxy.ListenTCP(ctx, addr)
	if err != nil {
		u.Close()
		t.Fatalf("fake dnsd tcp on %s: %v", addr, err)
	}
	t.Cleanup(func() { u.Close(); l.Close() })
	go serveUDP(u)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "dns-tcp %s\n", c.LocalAddr())
			c.Close()
		}
	}()
	return &fakeDNS{udp: u, tcp: l}
}

func serveUDP(u *net.UDPConn) {
	buf := make([]byte, 1500)
	oob := make([]byte, 256)
	for {
		_, oobn, _, from, err := u.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			return
		}
		orig, ok := origDst(oob[:oobn])
		if !ok {
			continue
		}
		a := orig.Addr().As4()
		pi := unix.PktInfo4(&unix.Inet4Pktinfo{Spec_dst: a})
		_, _, _ = u.WriteMsgUDPAddrPort([]byte("dns-udp "+orig.String()+"\n"), pi, from)
	}
}

func origDst(oob []byte) (netip.AddrPort, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.AddrPort{}, false
	}
	for i := range msgs {
		sa, err := unix.ParseOrigDstAddr(&msgs[i])
		if err != nil {
			continue
		}
		if in4, ok := sa.(*unix.SockaddrInet4); ok {
			return netip.AddrPortFrom(netip.AddrFrom4(in4.Addr), uint16(in4.Port)), true
		}
	}
	return netip.AddrPort{}, false
}
