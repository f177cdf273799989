package bpf

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// lab is the namespace topology of the integration tests:
//
//	sandbox A (netns, eth0 = a/32) ── <prefix>a ┐
//	sandbox B (netns, eth0 = b/32) ── <prefix>b ┼ host (gw/32 on both, program attached)
//	world     (netns, eth0 = w/32) ── aw<rand>  ┘ (worldHost/32, plain routing)
//
// with a fake proxy and a fake dnsd in the host, a world that records every
// frame it receives, and canary services.
type lab struct {
	t       *testing.T // the top-level test: owns every resource
	opts    Options
	pinRoot string
	p       *Path

	c                          [3]byte
	gw, a, b, worldHost, world netip.Addr
	sbxA, sbxB, worldNS        *ns
	epA, epB, epW              *endpoint
	hA, hB                     Handle

	rec      *recorder
	worldTCP *acceptCounter
	worldUDP atomic.Int64
	proxy    *fakeProxy
	dns      *fakeDNS
	drops    *dropLog
}

type dropLog struct {
	mu    sync.Mutex
	drops []Drop
}

func (d *dropLog) snapshot() []Drop {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Drop(nil), d.drops...)
}

// wait returns the first drop matching f, polling until a deadline.
func (d *dropLog) wait(t *testing.T, what string, f func(Drop) bool) Drop {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, x := range d.snapshot() {
			if f(x) {
				return x
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("no drop event for %s; got %v", what, d.snapshot())
	return Drop{}
}

const (
	sandboxA = 101
	sandboxB = 102
)

func newLab(t *testing.T) *lab {
	requireRoot(t)
	l := &lab{
		t:       t,
		opts:    Options{Guard: testGuard(), FlushInterval: 100 * time.Millisecond},
		pinRoot: filepath.Join("/sys/fs/bpf", "airlock-test-"+randHex(4)),
	}
	l.c = pickSubnet(t)
	l.gw, l.a, l.b = ip(l.c, 1), ip(l.c, 2), ip(l.c, 3)
	l.worldHost, l.world = ip(l.c, 129), ip(l.c, 130)

	cleanupPins(t, l.pinRoot, l.opts.Guard)
	var err error
	l.p, err = Open(l.pinRoot, l.opts)
	if err != nil {
		t.Fatalf("Open: %+v", err)
	}
	t.Cleanup(func() {
		if l.p != nil {
			if err := l.p.Teardown(); err != nil {
				t.Errorf("Teardown: %v", err)
			}
		}
		if _, err := os.Stat(l.pinRoot); err == nil {
			t.Errorf("pins left in %s", l.pinRoot)
			os.RemoveAll(l.pinRoot)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l.drops = &dropLog{}
	ch, err := l.p.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for d := range ch {
			l.drops.mu.Lock()
			l.drops.drops = append(l.drops.drops, d)
			l.drops.mu.Unlock()
		}
	}()

	// The world: plain routing from the host, nothing steers it.
	l.worldNS = newNS(t, "world")
	l.epW = newEndpoint(t, l.worldNS, "aw"+randHex(3), l.world, l.worldHost, nil)
	l.epW.up(t)
	l.rec = newRecorder(t, l.worldNS)
	must(t, l.worldNS.do(func() error {
		tl, err := net.Listen("tcp4", netip.AddrPortFrom(l.world, 80).String())
		if err != nil {
			return err
		}
		l.worldTCP = countAccepts(t, tl)
		for _, port := range []uint16{53, 443, 123} {
			u, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(l.world, port)))
			if err != nil {
				return err
			}
			t.Cleanup(func() { u.Close() })
			go func() {
				buf := make([]byte, 2048)
				for {
					if _, _, err := u.ReadFrom(buf); err != nil {
						return
					}
					l.worldUDP.Add(1)
				}
			}()
		}
		return nil
	}))

	prefix := l.opts.Guard.IfacePrefix
	l.sbxA = newNS(t, "sbxa")
	l.epA = newEndpoint(t, l.sbxA, prefix+"a", l.a, l.gw, net.HardwareAddr{0x02, 0xa1, 0, 0, 0, 0x0a})
	l.hA = l.attach(t, l.epA, SandboxID{Num: sandboxA, Name: "sandbox-a"})
	l.epA.up(t)
	l.sbxB = newNS(t, "sbxb")
	l.epB = newEndpoint(t, l.sbxB, prefix+"b", l.b, l.gw, net.HardwareAddr{0x02, 0xa1, 0, 0, 0, 0x0b})
	l.hB = l.attach(t, l.epB, SandboxID{Num: sandboxB, Name: "sandbox-b"})
	l.epB.up(t)

	l.proxy = startFakeProxy(t, "proxy")
	must(t, l.p.SetProxyListener(l.proxy.l))
	l.dns = startFakeDNS(t, l.gw)
	must(t, l.p.SetDNSSockets(l.dns.udp, l.dns.tcp))
	return l
}

func (l *lab) attach(t *testing.T, e *endpoint, id SandboxID) Handle {
	t.Helper()
	h, err := l.p.Attach(e.hostIdx, SandboxNet{Sandbox: id, Addr: e.addr, MAC: e.peerMAC, Gateway: e.gw})
	if err != nil {
		t.Fatalf("Attach: %+v", err)
	}
	return h
}

// worldSawNothing fails if the world received any frame or connection.
func (l *lab) worldSawNothing(t *testing.T) {
	t.Helper()
	time.Sleep(150 * time.Millisecond) // let in-flight frames land before looking
	if f := l.rec.seen(); len(f) > 0 {
		t.Errorf("the world received %d frames: %v", len(f), f)
	}
	if n := l.worldTCP.n.Load(); n != 0 {
		t.Errorf("the world's TCP service accepted %d connections", n)
	}
	if n := l.worldUDP.Load(); n != 0 {
		t.Errorf("the world's UDP services got %d datagrams", n)
	}
}

// expectProxy dials addr from n and wants the fake proxy to answer with addr
// as the connection's local address (the original destination).
func (l *lab) expectProxy(t *testing.T, n *ns, addr netip.AddrPort, tag string) {
	t.Helper()
	line, err := dialFrom(n, "tcp4", addr.String(), 3*time.Second)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, n.name, err)
	}
	if want := tag + " " + addr.String(); strings.TrimSpace(line) != want {
		t.Fatalf("dial %s: server said %q, want %q", addr, line, want)
	}
}

func (l *lab) expectNoConnect(t *testing.T, n *ns, addr netip.AddrPort) {
	t.Helper()
	if line, err := dialFrom(n, "tcp4", addr.String(), 700*time.Millisecond); err == nil {
		t.Fatalf("dial %s from %s succeeded (%q); want failure", addr, n.name, line)
	}
}

func (l *lab) stats(t *testing.T, num uint32) Stats {
	t.Helper()
	s, err := l.p.Stats(num)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
