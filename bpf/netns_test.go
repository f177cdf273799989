package bpf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"airlock/internal/tproxy"
)

// ns is a named network namespace the test created.
type ns struct {
	name string
	h    netns.NsHandle
	nl   *netlink.Handle
}

func newNS(t testing.TB, role string) *ns {
	t.Helper()
	name := "alkt-" + role + "-" + randHex(4)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	h, err := netns.NewNamed(name)
	if err != nil {
		t.Fatalf("create netns %s: %v", name, err)
	}
	if err := netns.Set(orig); err != nil {
		t.Fatalf("return to host netns: %v", err)
	}
	n := &ns{name: name, h: h}
	t.Cleanup(func() {
		if n.nl != nil {
			n.nl.Close()
		}
		h.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete netns %s: %v", name, err)
		}
	})
	n.nl, err = netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	lo, err := n.nl.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.nl.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	return n
}

// do runs f with the calling goroutine's thread inside the namespace:
// sockets f creates belong to it.
func (n *ns) do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	if err := netns.Set(n.h); err != nil {
		return err
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic("cannot return to the host netns: " + err.Error())
		}
	}()
	return f()
}

// endpoint is a veth whose host end is hostName (in the host netns) and whose
// other end is eth0 in n.
type endpoint struct {
	ns       *ns
	hostName string
	hostIdx  int
	hostMAC  net.HardwareAddr
	peerIdx  int
	peerMAC  net.HardwareAddr
	addr     netip.Addr // the peer's address
	gw       netip.Addr // the host end's address
}

func addr32(a netip.Addr) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}}
}

// newEndpoint creates the veth with the peer directly in n, host end up with
// gw/32 and a /32 route to addr; the peer stays down until up() is called.
func newEndpoint(t testing.TB, n *ns, hostName string, addr, gw netip.Addr, peerMAC net.HardwareAddr) *endpoint {
	t.Helper()
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hostName},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(int(n.h)),
	}
	if peerMAC != nil {
		veth.PeerHardwareAddr = peerMAC
	}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("create veth %s: %v", hostName, err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(hostName); err == nil {
			if err := netlink.LinkDel(l); err != nil {
				t.Errorf("delete veth %s: %v", hostName, err)
			}
		}
	})
	host, err := netlink.LinkByName(hostName)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := n.nl.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	e := &endpoint{ns: n, hostName: hostName, hostIdx: host.Attrs().Index, hostMAC: host.Attrs().HardwareAddr,
		peerIdx: peer.Attrs().Index, peerMAC: peer.Attrs().HardwareAddr, addr: addr, gw: gw}
	_ = writeSysctl("/proc/sys/net/ipv6/conf/"+hostName+"/disable_ipv6", "1")
	if err := n.do(func() error { return writeSysctl("/proc/sys/net/ipv6/conf/eth0/disable_ipv6", "1") }); err != nil {
		t.Fatal(err)
	}
	must(t, netlink.AddrAdd(host, addr32(gw)))
	must(t, netlink.LinkSetUp(host))
	must(t, netlink.RouteAdd(&netlink.Route{LinkIndex: e.hostIdx, Dst: prefix32(addr), Scope: netlink.SCOPE_LINK}))
	return e
}

// up configures and raises the peer: addr/32, a link route to gw, default via gw.
func (e *endpoint) up(t testing.TB) {
	t.Helper()
	peer, err := e.ns.nl.LinkByIndex(e.peerIdx)
	if err != nil {
		t.Fatal(err)
	}
	must(t, e.ns.nl.AddrAdd(peer, addr32(e.addr)))
	must(t, e.ns.nl.LinkSetUp(peer))
	must(t, e.ns.nl.RouteAdd(&netlink.Route{LinkIndex: e.peerIdx, Dst: prefix32(e.gw), Scope: netlink.SCOPE_LINK}))
	must(t, e.ns.nl.RouteAdd(&netlink.Route{LinkIndex: e.peerIdx, Gw: e.gw.AsSlice()}))
}

func prefix32(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// pickSubnet returns a random 198.19.X.0/24 that no host route touches.
func pickSubnet(t testing.TB) [3]byte {
	t.Helper()
	routes, err := netlink.RouteList(nil, unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		c := [3]byte{198, 19, byte(randInt(256))}
		probe := net.IPv4(c[0], c[1], c[2], 1)
		busy := false
		for _, r := range routes {
			if r.Dst != nil && r.Dst.Contains(probe) && r.Dst.IP.To4()[0] != 0 {
				busy = true
			}
		}
		if !busy {
			return c
		}
	}
	t.Fatal("no free 198.19.X.0/24")
	return [3]byte{}
}

func ip(c [3]byte, last byte) netip.Addr { return netip.AddrFrom4([4]byte{c[0], c[1], c[2], last}) }

// recorder counts every frame arriving on eth0 of a namespace (the "world").
type recorder struct {
	mu     sync.Mutex
	frames []string
	fd     int
	done   chan struct{}
}

func newRecorder(t testing.TB, n *ns) *recorder {
	t.Helper()
	r := &recorder{done: make(chan struct{})}
	err := n.do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		r.fd = fd
		tv := unix.Timeval{Usec: 100000}
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	})
	if err != nil {
		t.Fatalf("recorder socket: %v", err)
	}
	var stop atomic.Bool
	go func() {
		defer close(r.done)
		buf := make([]byte, 65536)
		for !stop.Load() {
			n, from, err := unix.Recvfrom(r.fd, buf, 0)
			if err != nil {
				continue
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue
			}
			// ARP is the host resolving the world's address for itself, not
			// sandbox traffic (ARP does not cross the host).
			if n >= 14 && binary.BigEndian.Uint16(buf[12:]) == 0x0806 {
				continue
			}
			r.mu.Lock()
			r.frames = append(r.frames, describeFrame(buf[:n]))
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		stop.Store(true)
		<-r.done
		unix.Close(r.fd)
	})
	return r
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.frames...)
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.frames = nil
}

func describeFrame(b []byte) string {
	if len(b) < 14 {
		return fmt.Sprintf("runt %x", b)
	}
	et := binary.BigEndian.Uint16(b[12:])
	if et == 0x0800 && len(b) >= 34 {
		return fmt.Sprintf("ipv4 proto %d %v -> %v", b[23], netip.AddrFrom4([4]byte(b[26:30])), netip.AddrFrom4([4]byte(b[30:34])))
	}
	return fmt.Sprintf("ethertype %#04x len %d", et, len(b))
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// sendFrames writes raw frames on eth0 of n through a packet socket (what a
// sandbox with CAP_NET_RAW can do).
func sendFrames(t testing.TB, n *ns, ifindex int, frames ...[]byte) {
	t.Helper()
	err := n.do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for _, f := range frames {
			sa := &unix.SockaddrLinklayer{Ifindex: ifindex, Protocol: htons(binary.BigEndian.Uint16(f[12:14])), Halen: 6}
			copy(sa.Addr[:], f[0:6])
			if err := unix.Sendto(fd, f, 0, sa); err != nil {
				return fmt.Errorf("send frame: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// acceptCounter accepts and counts connections (a canary service).
type acceptCounter struct {
	l *net.TCPListener
	n atomic.Int64
}

func countAccepts(t testing.TB, l net.Listener) *acceptCounter {
	c := &acceptCounter{l: l.(*net.TCPListener)}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.n.Add(1)
			conn.Close()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return c
}

// fakeProxy accepts steered connections and answers each with the local
// (original destination) and remote address it saw.
type fakeProxy struct {
	l    *net.TCPListener
	seen chan [2]string
}

func startFakeProxy(t testing.TB, tag string) *fakeProxy {
	t.Helper()
	l, err := tproxy.ListenTCP(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fp := &fakeProxy{l: l, seen: make(chan [2]string, 64)}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			select {
			case fp.seen <- [2]string{c.LocalAddr().String(), c.RemoteAddr().String()}:
			default:
			}
			fmt.Fprintf(c, "%s %s\n", tag, c.LocalAddr())
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return fp
}

// dialFrom connects from inside n and returns the first line the server
// writes.
func dialFrom(n *ns, network, addr string, timeout time.Duration) (string, error) {
	var line string
	err := n.do(func() error {
		d := net.Dialer{Timeout: timeout}
		d.SetMultipathTCP(false)
		c, err := d.Dial(network, addr)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		buf := make([]byte, 256)
		k, err := c.Read(buf)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && k == 0 {
			return err
		}
		line = string(buf[:k])
		return nil
	})
	return line, err
}
