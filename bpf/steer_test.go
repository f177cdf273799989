package bpf

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"airlock/internal/tproxy"
)

func TestSteering(t *testing.T) {
	l := newLab(t)

	t.Run("tcp to the world reaches the proxy with its original destination", func(t *testing.T) {
		dst := netip.AddrPortFrom(l.world, 80)
		l.expectProxy(t, l.sbxA, dst, "proxy")
		select {
		case seen := <-l.proxy.seen:
			if seen[0] != dst.String() || !strings.HasPrefix(seen[1], l.a.String()+":") {
				t.Errorf("proxy saw local %s remote %s; want %s from %s", seen[0], seen[1], dst, l.a)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("proxy saw no connection")
		}
		// Any port, any address: a host that does not exist is proxied too.
		l.expectProxy(t, l.sbxA, netip.AddrPortFrom(ip(l.c, 200), 8443), "proxy")
		l.worldSawNothing(t)
		if s := l.stats(t, sandboxA); s.Passed.TCPProxy < 2 || s.Passed.TCPOwned == 0 {
			t.Errorf("counters: %+v", s)
		}
	})

	t.Run("dns to any resolver is answered by dnsd from that resolver's address", func(t *testing.T) {
		for _, dst := range []netip.AddrPort{
			netip.AddrPortFrom(l.world, 53), netip.AddrPortFrom(ip(l.c, 200), 53), netip.AddrPortFrom(l.gw, 53),
		} {
			// A connected UDP socket accepts only replies from dst: an answer
			// proves dnsd answered from the original address.
			got, err := udpQuery(l.sbxA, dst)
			if err != nil {
				t.Fatalf("udp dns to %s: %v", dst, err)
			}
			if want := "dns-udp " + dst.String(); got != want {
				t.Errorf("udp dns to %s: got %q, want %q", dst, got, want)
			}
			line, err := dialFrom(l.sbxA, "tcp4", dst.String(), 3*time.Second)
			if err != nil {
				t.Fatalf("tcp dns to %s: %v", dst, err)
			}
			if want := "dns-tcp " + dst.String(); strings.TrimSpace(line) != want {
				t.Errorf("tcp dns to %s: got %q, want %q", dst, line, want)
			}
		}
		l.worldSawNothing(t)
	})

	t.Run("a host service on 0.0.0.0 is reached only as the proxy", func(t *testing.T) {
		hl, err := net.Listen("tcp4", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		svc := countAccepts(t, hl)
		port := uint16(hl.Addr().(*net.TCPAddr).Port)
		l.expectProxy(t, l.sbxA, netip.AddrPortFrom(l.gw, port), "proxy")
		l.expectProxy(t, l.sbxA, netip.AddrPortFrom(l.worldHost, port), "proxy")
		if n := svc.n.Load(); n != 0 {
			t.Errorf("host service accepted %d connections from the sandbox", n)
		}
	})

	t.Run("sandbox to sandbox lands at the proxy", func(t *testing.T) {
		var bsvc *acceptCounter
		must(t, l.sbxB.do(func() error {
			bl, err := net.Listen("tcp4", netip.AddrPortFrom(l.b, 0).String())
			if err != nil {
				return err
			}
			bsvc = countAccepts(t, bl)
			return nil
		}))
		port := uint16(bsvc.l.Addr().(*net.TCPAddr).Port)
		l.expectProxy(t, l.sbxA, netip.AddrPortFrom(l.b, port), "proxy")
		if n := bsvc.n.Load(); n != 0 {
			t.Errorf("sandbox B accepted %d connections from sandbox A", n)
		}
	})

	t.Run("tcp to the gateway's proxy port goes to the explicit listener", func(t *testing.T) {
		const pport = 3128
		h, err := l.p.Attach(l.epA.hostIdx, SandboxNet{Sandbox: SandboxID{Num: sandboxA, Name: "sandbox-a"},
			Addr: l.a, MAC: l.epA.peerMAC, Gateway: l.gw, ProxyPort: pport})
		if err != nil {
			t.Fatalf("re-Attach: %+v", err)
		}
		if h.LinkID != l.hA.LinkID {
			t.Errorf("re-Attach replaced the link: %d, was %d", h.LinkID, l.hA.LinkID)
		}
		ex := startFakeProxy(l.t, "explicit")
		must(t, l.p.SetExplicitProxyListener(ex.l))
		l.expectProxy(t, l.sbxA, netip.AddrPortFrom(l.gw, pport), "explicit")
		l.expectProxy(t, l.sbxA, netip.AddrPortFrom(l.world, pport), "proxy")
		ex.l.Close()
		l.expectProxy(t, l.sbxA, netip.AddrPortFrom(l.gw, pport), "proxy")
		if s := l.stats(t, sandboxA); s.Passed.TCPExplicit != 1 {
			t.Errorf("explicit counter %d, want 1", s.Passed.TCPExplicit)
		}
	})

	t.Run("a reconnect over a proxy-side TIME_WAIT socket reaches the proxy", func(t *testing.T) {
		dst := netip.AddrPortFrom(l.world, 80)
		var port int
		for i := range 2 {
			err := l.sbxA.do(func() error {
				d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: l.a.AsSlice(), Port: port},
					Control: reuseAddr}
				d.SetMultipathTCP(false)
				c, err := d.Dial("tcp4", dst.String())
				// The sandbox's own side of the first connection may
				// still be in LAST_ACK for a moment after its close;
				// only that local state gives EADDRNOTAVAIL.
				for try := 0; errors.Is(err, unix.EADDRNOTAVAIL) && try < 100; try++ {
					time.Sleep(10 * time.Millisecond)
					c, err = d.Dial("tcp4", dst.String())
				}
				if err != nil {
					return err
				}
				defer c.Close()
				port = c.LocalAddr().(*net.TCPAddr).Port
				c.SetDeadline(time.Now().Add(3 * time.Second))
				// Read to EOF: the proxy closes first, so its side enters
				// TIME_WAIT; closing before its FIN arrived would put the
				// sandbox's side there instead and the reuse would fail
				// with EADDRNOTAVAIL.
				b, err := io.ReadAll(c)
				if err == nil && !strings.HasPrefix(string(b), "proxy ") {
					err = fmt.Errorf("got %q, want the proxy's greeting", b)
				}
				return err
			})
			if err != nil {
				t.Fatalf("connection %d from port %d: %v", i+1, port, err)
			}
		}
		if s := l.stats(t, sandboxA); s.Passed.TCPOwned == 0 {
			t.Errorf("no packet was kept with a proxy-side socket: %+v", s)
		}
	})

	t.Run("raw frames, spoofing and other protocols are dropped with events", func(t *testing.T) {
		l.rec.reset()
		a, gw, w := l.a, l.gw, l.world
		mac, hostMAC := l.epA.peerMAC, l.epA.hostMAC
		spoof := ip(l.c, 77)
		frame := func(src net.HardwareAddr, et uint16, payload []byte) []byte {
			f := ethFrame(src, et, payload)
			copy(f[0:6], hostMAC)
			return f
		}
		v4 := func(src, dst netip.Addr, proto uint8, l4 []byte) []byte {
			return frame(mac, 0x0800, ipv4Packet(ipOpts{proto: proto, src: src, dst: dst}, l4))
		}
		cases := []struct {
			name   string
			frame  []byte
			reason Reason
			dst    netip.Addr
		}{
			{"spoofed source to the world", v4(spoof, w, 6, tcpSegment(40001, 80, 0x02)), ReasonSpoofedSource, w},
			{"spoofed gateway source", v4(gw, w, 6, tcpSegment(40002, 80, 0x02)), ReasonSpoofedSource, w},
			{"quic-shaped udp", v4(a, w, 17, udpDatagram(40003, 443, append([]byte{0xc3, 0, 0, 0, 1}, make([]byte, 1200)...))), ReasonUDP, w},
			{"ntp", v4(a, w, 17, udpDatagram(40004, 123, make([]byte, 48))), ReasonUDP, w},
			{"icmp to the world", v4(a, w, 1, icmpEcho()), ReasonICMP, w},
			{"icmp to the gateway", v4(a, gw, 1, icmpEcho()), ReasonICMP, gw},
			{"gre", v4(a, w, 47, make([]byte, 24)), ReasonProtocol, w},
			{"fragment", frame(mac, 0x0800, ipv4Packet(ipOpts{proto: 17, src: a, dst: w, fragOff: 0x2000}, udpDatagram(40005, 53, []byte("q")))), ReasonFragment, w},
			{"ipv6", frame(mac, 0x86dd, ipv6Packet(6, netip.MustParseAddr("fd00::2"), netip.MustParseAddr("fd00::1"), tcpSegment(40006, 80, 0x02))), ReasonIPv6, netip.MustParseAddr("fd00::1")},
			{"arp for the world", frame(mac, 0x0806, arpPacket(1, mac, a, w)), ReasonARP, w},
			{"arp with another sender", frame(mac, 0x0806, arpPacket(1, mac, spoof, gw)), ReasonSpoofedSource, gw},
			{"spoofed mac", frame(net.HardwareAddr{0x02, 0xee, 0, 0, 0, 1}, 0x0800, ipv4Packet(ipOpts{proto: 6, src: a, dst: w}, tcpSegment(40007, 80, 0x02))), ReasonSpoofedMAC, netip.Addr{}},
		}
		before := l.stats(t, sandboxA)
		for _, c := range cases {
			sendFrames(t, l.sbxA, l.epA.peerIdx, c.frame)
		}
		// And through ordinary sockets.
		must(t, l.sbxA.do(func() error {
			u, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(w, 443)))
			if err != nil {
				return err
			}
			defer u.Close()
			_, err = u.Write([]byte("quic initial"))
			return err
		}))
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				l.drops.wait(t, c.name, func(d Drop) bool {
					return d.Sandbox.Num == sandboxA && d.Reason == c.reason && (!c.dst.IsValid() || d.Dst == c.dst)
				})
			})
		}
		l.drops.wait(t, "udp socket to 443", func(d Drop) bool {
			return d.Reason == ReasonUDP && d.Dst == w && d.DstPort == 443 && d.Src == a && d.Protocol() == "udp"
		})
		after := l.stats(t, sandboxA)
		if got := after.TotalDropped() - before.TotalDropped(); got < uint64(len(cases)+1) {
			t.Errorf("counted %d drops, want at least %d: %+v", got, len(cases)+1, after)
		}
		l.worldSawNothing(t)
	})

	t.Run("cap_net_admin in the sandbox cannot borrow another address", func(t *testing.T) {
		peer, err := l.sbxA.nl.LinkByIndex(l.epA.peerIdx)
		must(t, err)
		must(t, l.sbxA.nl.AddrAdd(peer, addr32(l.b)))
		defer l.sbxA.nl.AddrDel(peer, addr32(l.b))
		err = l.sbxA.do(func() error {
			d := net.Dialer{Timeout: 700 * time.Millisecond, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(l.b, 0))}
			d.SetMultipathTCP(false)
			c, err := d.Dial("tcp4", netip.AddrPortFrom(l.world, 80).String())
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			t.Fatal("a connection from a borrowed address got through")
		}
		l.drops.wait(t, "borrowed source", func(d Drop) bool {
			return d.Sandbox.Num == sandboxA && d.Reason == ReasonSpoofedSource && d.Src == l.b
		})
		l.worldSawNothing(t)
	})

	t.Run("cap_net_admin in the sandbox cannot change its MAC", func(t *testing.T) {
		peer, err := l.sbxA.nl.LinkByIndex(l.epA.peerIdx)
		must(t, err)
		spoofed := net.HardwareAddr{0x02, 0xee, 0, 0, 0, 2}
		must(t, l.sbxA.nl.LinkSetHardwareAddr(peer, spoofed))
		gwNeigh := &netlink.Neigh{LinkIndex: l.epA.peerIdx, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
			IP: l.gw.AsSlice(), HardwareAddr: l.epA.hostMAC}
		defer func() {
			_ = l.sbxA.nl.NeighDel(gwNeigh)
			must(t, l.sbxA.nl.LinkSetHardwareAddr(peer, l.epA.peerMAC))
			l.expectProxy(t, l.sbxA, netip.AddrPortFrom(l.world, 80), "proxy")
		}()
		spoofedMAC := func(ethertype uint16) func(Drop) bool {
			return func(d Drop) bool {
				return d.Sandbox.Num == sandboxA && d.Reason == ReasonSpoofedMAC && d.EtherType == ethertype &&
					d.MAC.String() == spoofed.String()
			}
		}
		// The MAC change flushes the sandbox's neighbours: its ARP request
		// for the gateway leaves from the new MAC and is dropped.
		l.expectNoConnect(t, l.sbxA, netip.AddrPortFrom(l.world, 80))
		l.drops.wait(t, "arp from the spoofed mac", spoofedMAC(0x0806))
		// With the gateway's MAC known, IPv4 leaves from the new MAC.
		must(t, l.sbxA.nl.NeighSet(gwNeigh))
		l.expectNoConnect(t, l.sbxA, netip.AddrPortFrom(l.world, 80))
		if _, err := udpQueryTimeout(l.sbxA, netip.AddrPortFrom(l.world, 53), 700*time.Millisecond); err == nil {
			t.Error("dns answered from the spoofed mac")
		}
		l.drops.wait(t, "ipv4 from the spoofed mac", spoofedMAC(0x0800))
		l.worldSawNothing(t)
	})

	t.Run("no proxy listener fails closed and a new one restores without re-attach", func(t *testing.T) {
		dst := netip.AddrPortFrom(l.world, 80)
		l.proxy.l.Close()
		l.expectNoConnect(t, l.sbxA, dst)
		l.drops.wait(t, "no proxy", func(d Drop) bool { return d.Reason == ReasonNoProxy && d.Dst == l.world })
		l.worldSawNothing(t)
		l.proxy = startFakeProxy(l.t, "proxy2")
		must(t, l.p.SetProxyListener(l.proxy.l))
		l.expectProxy(t, l.sbxA, dst, "proxy2")
		hs, err := l.p.Handles()
		must(t, err)
		for _, h := range hs {
			if h.Ifindex == l.hA.Ifindex && h.LinkID != l.hA.LinkID {
				t.Errorf("link changed: %d, was %d", h.LinkID, l.hA.LinkID)
			}
		}
	})

	t.Run("no dns sockets fail closed and new ones restore without re-attach", func(t *testing.T) {
		dst := netip.AddrPortFrom(l.world, 53)
		l.dns.udp.Close()
		l.dns.tcp.Close()
		if got, err := udpQueryTimeout(l.sbxA, dst, 700*time.Millisecond); err == nil {
			t.Fatalf("udp dns answered (%q) with no dnsd", got)
		}
		l.expectNoConnect(t, l.sbxA, dst)
		l.drops.wait(t, "no dns socket", func(d Drop) bool { return d.Reason == ReasonNoDNS && d.Dst == l.world })
		l.worldSawNothing(t)
		l.dns = startFakeDNS(l.t, l.gw)
		must(t, l.p.SetDNSSockets(l.dns.udp, l.dns.tcp))
		if got, err := udpQuery(l.sbxA, dst); err != nil || got != "dns-udp "+dst.String() {
			t.Fatalf("udp dns after restart: %q, %v", got, err)
		}
	})

	t.Run("a detached program still fails closed", func(t *testing.T) {
		hl, err := net.Listen("tcp4", "0.0.0.0:0")
		must(t, err)
		svc := countAccepts(t, hl)
		port := uint16(hl.Addr().(*net.TCPAddr).Port)
		must(t, l.p.Detach(l.hA))
		// Make the host willing to forward from this veth, as a host with
		// forwarding on would be: only the nft guard is left.
		must(t, writeSysctl("/proc/sys/net/ipv4/conf/"+l.epA.hostName+"/forwarding", "1"))
		l.rec.reset()
		l.expectNoConnect(t, l.sbxA, netip.AddrPortFrom(l.world, 9))
		l.expectNoConnect(t, l.sbxA, netip.AddrPortFrom(l.gw, port))
		l.expectNoConnect(t, l.sbxA, netip.AddrPortFrom(l.world, 80))
		if n := svc.n.Load(); n != 0 {
			t.Errorf("host service on 0.0.0.0 accepted %d connections with the program detached", n)
		}
		l.worldSawNothing(t)

		// Control: without the nft guard the same packets do reach the
		// world, so the check above can fail.
		must(t, removeGuards(l.opts.Guard))
		// Another package's test (a CNI plugin setting, then restoring,
		// net.ipv4.ip_forward) may reset every interface's forwarding
		// while this runs: set it again before each try.
		for try := 0; try < 3 && len(l.rec.seen()) == 0; try++ {
			must(t, writeSysctl("/proc/sys/net/ipv4/conf/"+l.epA.hostName+"/forwarding", "1"))
			l.expectNoConnect(t, l.sbxA, netip.AddrPortFrom(l.world, 9))
			time.Sleep(150 * time.Millisecond)
		}
		if len(l.rec.seen()) == 0 {
			t.Error("control: without guards the world saw nothing either; the detach check proves nothing")
		}
		must(t, installGuards(l.opts.Guard))
		l.rec.reset()
		l.hA = l.attach(t, l.epA, SandboxID{Num: sandboxA, Name: "sandbox-a"})
		if b, _ := os.ReadFile("/proc/sys/net/ipv4/conf/" + l.epA.hostName + "/forwarding"); strings.TrimSpace(string(b)) != "0" {
			t.Errorf("Attach left forwarding=%q", b)
		}
		l.expectProxy(t, l.sbxA, netip.AddrPortFrom(l.world, 80), "proxy2")
		l.worldSawNothing(t)
	})

	t.Run("reconcile removes the defunct link of a deleted veth", func(t *testing.T) {
		link, err := netlink.LinkByIndex(l.epB.hostIdx)
		must(t, err)
		must(t, netlink.LinkDel(link))
		// A block on a sandbox still attached must survive: Reconcile at
		// a restart may not lift a lockdown (fail closed).
		must(t, l.p.BlockSandbox(sandboxA, BlockLockdown, true))
		removed, err := l.p.Reconcile([]int{l.hA.Ifindex})
		must(t, err)
		if b, err := l.p.SandboxBlock(sandboxA); err != nil || b != BlockLockdown {
			t.Errorf("block of attached sandbox-a after Reconcile: %b, %v; want the lockdown block kept", b, err)
		}
		must(t, l.p.BlockSandbox(sandboxA, BlockLockdown, false))
		if len(removed) != 1 || removed[0] != l.hB.Ifindex {
			t.Errorf("Reconcile removed %v, want [%d]", removed, l.hB.Ifindex)
		}
		if _, err := os.Stat(l.p.linkPin(l.hB.Ifindex)); !os.IsNotExist(err) {
			t.Errorf("defunct link pin still there: %v", err)
		}
		if s := l.stats(t, sandboxB); s.TotalDropped() != 0 || s.Passed != (Passed{}) {
			t.Errorf("counters of the removed sandbox survived Reconcile: %+v", s)
		}
		hs, err := l.p.Handles()
		must(t, err)
		if len(hs) != 1 || hs[0].Ifindex != l.hA.Ifindex || hs[0].Sandbox.Name != "sandbox-a" {
			t.Errorf("Handles after Reconcile: %+v", hs)
		}
	})

	t.Run("pins outlive the process and a new process reopens them", func(t *testing.T) {
		dst := netip.AddrPortFrom(l.world, 80)
		l.proxy.l.Close()
		must(t, l.p.Close())
		l.p = nil
		l.childReopen(t, dst)
		// The child is gone, and its listener with it: closed again.
		l.expectNoConnect(t, l.sbxA, dst)
		l.worldSawNothing(t)
		p, err := Reopen(l.pinRoot, l.opts)
		if err != nil {
			t.Fatalf("Reopen: %+v", err)
		}
		l.p = p
	})
}

func reuseAddr(_, _ string, c syscall.RawConn) error {
	var opErr error
	err := c.Control(func(fd uintptr) {
		opErr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	})
	return errors.Join(err, opErr)
}

// udpQuery sends one datagram from a connected socket in n and returns the
// reply.
func udpQuery(n *ns, dst netip.AddrPort) (string, error) {
	return udpQueryTimeout(n, dst, 3*time.Second)
}

func udpQueryTimeout(n *ns, dst netip.AddrPort, timeout time.Duration) (string, error) {
	var got string
	err := n.do(func() error {
		u, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(dst))
		if err != nil {
			return err
		}
		defer u.Close()
		if _, err := u.Write([]byte("query")); err != nil {
			return err
		}
		u.SetReadDeadline(time.Now().Add(timeout))
		buf := make([]byte, 512)
		k, err := u.Read(buf)
		got = strings.TrimSpace(string(buf[:k]))
		return err
	})
	return got, err
}

const childEnv = "AIRLOCK_BPF_REOPEN_CHILD"

type childArgs struct {
	PinRoot string
	Guard   GuardConfig
	Ifindex int
}

// childReopen runs TestReopenChild in a new process: it reopens the pins,
// checks the attachment is there, serves one steered connection and exits.
func (l *lab) childReopen(t *testing.T, dst netip.AddrPort) {
	args, _ := json.Marshal(childArgs{PinRoot: l.pinRoot, Guard: l.opts.Guard, Ifindex: l.hA.Ifindex})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestReopenChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+string(args))
	out, err := cmd.StdoutPipe()
	must(t, err)
	cmd.Stderr = os.Stderr
	must(t, cmd.Start())
	sc := bufio.NewScanner(out)
	ready := false
	var transcript []string
	for sc.Scan() {
		transcript = append(transcript, sc.Text())
		if sc.Text() == "CHILD READY" {
			ready = true
			break
		}
	}
	if !ready {
		cmd.Wait()
		t.Fatalf("child never got ready: %v", transcript)
	}
	l.expectProxy(t, l.sbxA, dst, "child")
	for sc.Scan() {
		transcript = append(transcript, sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child failed: %v\n%s", err, strings.Join(transcript, "\n"))
	}
}

func TestReopenChild(t *testing.T) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		t.Skip("skipping: runs only as the child of TestSteering")
	}
	var a childArgs
	must(t, json.Unmarshal([]byte(raw), &a))
	p, err := Reopen(a.PinRoot, Options{Guard: a.Guard})
	if err != nil {
		t.Fatalf("Reopen: %+v", err)
	}
	defer p.Close()
	hs, err := p.Handles()
	must(t, err)
	found := false
	for _, h := range hs {
		found = found || (h.Ifindex == a.Ifindex && h.Sandbox.Num == sandboxA)
	}
	if !found {
		t.Fatalf("attachment %d not among the pinned handles %+v", a.Ifindex, hs)
	}
	l, err := tproxy.ListenTCP(context.Background(), "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	must(t, p.SetProxyListener(l))
	fmt.Println("CHILD READY")
	l.SetDeadline(time.Now().Add(20 * time.Second))
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("child accept: %v", err)
	}
	fmt.Fprintf(c, "child %s\n", c.LocalAddr())
	c.Close()
}
