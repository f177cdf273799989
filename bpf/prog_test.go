package bpf

import (
	"context"
	"net"
	"testing"
	"time"

	"airlock/audit"
	"airlock/internal/tproxy"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"
)

const (
	actOK   = 0
	actShot = 2
)

// unitNet is the configuration the synthetic-packet tests put on loopback's
// ifindex (BPF_PROG_TEST_RUN runs skbs on loopback).
var unitNet = SandboxNet{
	Sandbox: SandboxID{Num: 7, Name: "unit"},
	Addr:    mustAddr("198.18.7.2"),
	MAC:     macSandbox,
	Gateway: mustAddr("198.18.7.1"),
}

func unitPath(t testing.TB, withSockets bool) *Path {
	p := openTest(t, Options{})
	if err := p.writeConfig(configOf(1, unitNet)); err != nil {
		t.Fatal(err)
	}
	p.names[unitNet.Sandbox.Num] = unitNet.Sandbox.Name
	if withSockets {
		ctx := context.Background()
		l, err := tproxy.ListenTCP(ctx, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		u, err := tproxy.ListenUDP(ctx, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { u.Close() })
		d, err := tproxy.ListenTCP(ctx, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		if err := p.SetProxyListener(l); err != nil {
			t.Fatal(err)
		}
		if err := p.SetDNSSockets(u, d); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

type branch struct {
	name   string
	frame  []byte
	act    uint32
	reason Reason // for drops
	passed func(Passed) uint64
}

func branches() []branch {
	sb, gw, world := unitNet.Addr, unitNet.Gateway, mustAddr("198.18.200.10")
	other := mustAddr("198.18.7.3")
	v4 := func(proto uint8, l4 []byte) []byte {
		return ethFrame(macSandbox, 0x0800, ipv4Packet(ipOpts{proto: proto, src: sb, dst: world}, l4))
	}
	return []branch{
		{name: "arp request for gateway", act: actOK,
			frame:  ethFrame(macSandbox, 0x0806, arpPacket(1, macSandbox, sb, gw)),
			passed: func(p Passed) uint64 { return p.ARP }},
		{name: "arp reply to gateway", act: actOK,
			frame:  ethFrame(macSandbox, 0x0806, arpPacket(2, macSandbox, sb, gw)),
			passed: func(p Passed) uint64 { return p.ARP }},
		{name: "arp request for other address", act: actShot, reason: ReasonARP,
			frame: ethFrame(macSandbox, 0x0806, arpPacket(1, macSandbox, sb, other))},
		{name: "arp with spoofed sender address", act: actShot, reason: ReasonSpoofedSource,
			frame: ethFrame(macSandbox, 0x0806, arpPacket(1, macSandbox, other, gw))},
		{name: "spoofed source mac", act: actShot, reason: ReasonSpoofedMAC,
			frame: ethFrame(net.HardwareAddr{2, 0xbb, 0, 0, 0, 9}, 0x0800,
				ipv4Packet(ipOpts{proto: 6, src: sb, dst: world}, tcpSegment(40000, 443, 0x02)))},
		{name: "spoofed source address", act: actShot, reason: ReasonSpoofedSource,
			frame: ethFrame(macSandbox, 0x0800, ipv4Packet(ipOpts{proto: 6, src: other, dst: world}, tcpSegment(40000, 443, 0x02)))},
		{name: "tcp syn to world", act: actShot, reason: ReasonAssign, // test runs are not at tc ingress: assign fails after the listener lookup
			frame: v4(6, tcpSegment(40000, 443, 0x02))},
		{name: "udp 53 to foreign resolver", act: actShot, reason: ReasonAssign,
			frame: v4(17, udpDatagram(40000, 53, []byte("query")))},
		{name: "tcp 53 to foreign resolver", act: actShot, reason: ReasonAssign,
			frame: v4(6, tcpSegment(40000, 53, 0x02))},
		{name: "udp other port", act: actShot, reason: ReasonUDP,
			frame: v4(17, udpDatagram(40000, 123, []byte("ntp")))},
		{name: "quic-shaped udp 443", act: actShot, reason: ReasonUDP,
			frame: v4(17, udpDatagram(40000, 443, append([]byte{0xc3, 0, 0, 0, 1}, make([]byte, 1200)...)))},
		{name: "icmp echo to world", act: actShot, reason: ReasonICMP, frame: v4(1, icmpEcho())},
		{name: "icmp echo to gateway", act: actShot, reason: ReasonICMP,
			frame: ethFrame(macSandbox, 0x0800, ipv4Packet(ipOpts{proto: 1, src: sb, dst: gw}, icmpEcho()))},
		{name: "gre", act: actShot, reason: ReasonProtocol, frame: v4(47, make([]byte, 24))},
		{name: "sctp", act: actShot, reason: ReasonProtocol, frame: v4(132, make([]byte, 24))},
		{name: "ipv6 tcp", act: actShot, reason: ReasonIPv6,
			frame: ethFrame(macSandbox, 0x86dd, ipv6Packet(6, mustAddr("fd00::2"), mustAddr("2001:db8::1"), tcpSegment(40000, 443, 0x02)))},
		{name: "first fragment", act: actShot, reason: ReasonFragment,
			frame: ethFrame(macSandbox, 0x0800, ipv4Packet(ipOpts{proto: 17, src: sb, dst: world, fragOff: 0x2000}, udpDatagram(40000, 53, []byte("q"))))},
		{name: "later fragment", act: actShot, reason: ReasonFragment,
			frame: ethFrame(macSandbox, 0x0800, ipv4Packet(ipOpts{proto: 17, src: sb, dst: world, fragOff: 0x0010}, make([]byte, 16)))},
		{name: "ip options", act: actShot, reason: ReasonIPOptions,
			frame: ethFrame(macSandbox, 0x0800, ipv4Packet(ipOpts{proto: 6, src: sb, dst: world, options: true}, tcpSegment(40000, 443, 0x02)))},
		{name: "truncated tcp", act: actShot, reason: ReasonMalformed,
			frame: v4(6, tcpSegment(40000, 443, 0x02)[:10])},
		{name: "other ethertype", act: actShot, reason: ReasonEtherType,
			frame: ethFrame(macSandbox, 0x88cc, make([]byte, 46))},
		{name: "vlan tag in frame", act: actShot, reason: ReasonEtherType,
			frame: ethFrame(macSandbox, 0x8100, make([]byte, 46))},
	}
}

func runOnce(t *testing.T, p *Path, frame []byte) uint32 {
	t.Helper()
	ret, err := p.objs.AlkSteer.Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		t.Fatalf("prog run: %v", err)
	}
	return ret
}

func TestProgramBranches(t *testing.T) {
	requireRoot(t)
	p := unitPath(t, true)
	for _, b := range branches() {
		t.Run(b.name, func(t *testing.T) {
			before, err := p.Stats(unitNet.Sandbox.Num)
			if err != nil {
				t.Fatal(err)
			}
			ret := runOnce(t, p, b.frame)
			after, _ := p.Stats(unitNet.Sandbox.Num)
			if ret != b.act {
				t.Fatalf("verdict %d, want %d (stats %s)", ret, b.act, fmtStats(after))
			}
			if b.act == actOK {
				if got := b.passed(after.Passed) - b.passed(before.Passed); got != 1 {
					t.Errorf("pass counter moved by %d, want 1: %s", got, fmtStats(after))
				}
				return
			}
			if got := after.Dropped[b.reason] - before.Dropped[b.reason]; got != 1 {
				t.Errorf("drop reason %v moved by %d, want 1: %s", b.reason, got, fmtStats(after))
			}
			if after.TotalDropped()-before.TotalDropped() != 1 {
				t.Errorf("more than one drop counted: %s", fmtStats(after))
			}
		})
	}
}

func TestProgramFailsClosedWithoutSockets(t *testing.T) {
	requireRoot(t)
	p := unitPath(t, false)
	sb, world := unitNet.Addr, mustAddr("198.18.200.10")
	cases := []struct {
		name   string
		frame  []byte
		reason Reason
	}{
		{"tcp without proxy", ethFrame(macSandbox, 0x0800, ipv4Packet(ipOpts{proto: 6, src: sb, dst: world}, tcpSegment(1, 443, 2))), ReasonNoProxy},
		{"udp dns without dnsd", ethFrame(macSandbox, 0x0800, ipv4Packet(ipOpts{proto: 17, src: sb, dst: world}, udpDatagram(1, 53, nil))), ReasonNoDNS},
		{"tcp dns without dnsd", ethFrame(macSandbox, 0x0800, ipv4Packet(ipOpts{proto: 6, src: sb, dst: world}, tcpSegment(1, 53, 2))), ReasonNoDNS},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, _ := p.Stats(unitNet.Sandbox.Num)
			if ret := runOnce(t, p, c.frame); ret != actShot {
				t.Fatalf("verdict %d, want drop", ret)
			}
			after, _ := p.Stats(unitNet.Sandbox.Num)
			if after.Dropped[c.reason]-before.Dropped[c.reason] != 1 {
				t.Errorf("want one %v drop: %s", c.reason, fmtStats(after))
			}
		})
	}
}

func TestProgramDropsOnUnconfiguredInterface(t *testing.T) {
	requireRoot(t)
	p := openTest(t, Options{})
	arp := ethFrame(macSandbox, 0x0806, arpPacket(1, macSandbox, unitNet.Addr, unitNet.Gateway))
	if ret := runOnce(t, p, arp); ret != actShot {
		t.Fatalf("verdict %d on an interface without config, want drop", ret)
	}
	s, err := p.Stats(0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Dropped[ReasonNoConfig] != 1 {
		t.Errorf("want one unconfigured-interface drop on sandbox 0: %s", fmtStats(s))
	}
}

// A flood is counted in full but reported at the rate limit: the reader gets
// the budget's worth of events plus one rate-limited record carrying the rest.
func TestDropEventsAreRateLimitedAndCounted(t *testing.T) {
	requireRoot(t)
	p := openTest(t, Options{EventBudget: 10, EventWindow: time.Hour, FlushInterval: 50 * time.Millisecond})
	if err := p.writeConfig(configOf(1, unitNet)); err != nil {
		t.Fatal(err)
	}
	p.names[unitNet.Sandbox.Num] = unitNet.Sandbox.Name
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := p.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const flood = 5000
	frame := ethFrame(macSandbox, 0x0800, ipv4Packet(ipOpts{proto: 17, src: unitNet.Addr, dst: mustAddr("198.18.200.10")}, udpDatagram(1, 443, nil)))
	if _, err := p.objs.AlkSteer.Run(&ebpf.RunOptions{Data: frame, Repeat: flood}); err != nil {
		t.Fatal(err)
	}
	s, _ := p.Stats(unitNet.Sandbox.Num)
	if s.Dropped[ReasonUDP] < flood {
		t.Fatalf("counted %d drops, want >= %d", s.Dropped[ReasonUDP], flood)
	}
	var reported, limited uint64
	deadline := time.After(5 * time.Second)
	for reported+limited < s.Dropped[ReasonUDP] {
		select {
		case d := <-ch:
			if d.Sandbox.Name != "unit" {
				t.Errorf("drop without the sandbox's name: %+v", d)
			}
			if d.Reason == ReasonRateLimited {
				limited += d.Count
				continue
			}
			if d.Reason != ReasonUDP || d.DstPort != 443 || d.Src != unitNet.Addr {
				t.Errorf("unexpected drop %+v", d)
			}
			reported += d.Count
		case <-deadline:
			t.Fatalf("reported %d + rate-limited %d, want %d in total", reported, limited, s.Dropped[ReasonUDP])
		}
	}
	if reported != 10 {
		t.Errorf("reported %d individual drops, want the budget of 10", reported)
	}
}

func TestEmitDrops(t *testing.T) {
	requireRoot(t)
	p := unitPath(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan audit.Event, 16)
	done := make(chan error, 1)
	go func() { done <- p.EmitDrops(ctx, audit.EmitterFunc(func(e audit.Event) { got <- e })) }()
	frame := ethFrame(macSandbox, 0x0800, ipv4Packet(ipOpts{proto: 1, src: unitNet.Addr, dst: mustAddr("198.18.200.10")}, icmpEcho()))
	runOnce(t, p, frame)
	select {
	case e := <-got:
		if e.Kind != audit.KindDrop || e.Sandbox != "unit" || e.Drop == nil || e.Drop.Protocol != "icmp" ||
			e.Drop.Dest != "198.18.200.10" || e.Reason != "icmp" || e.Drop.Count != 1 {
			t.Errorf("event %+v drop %+v", e, e.Drop)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no audit event for the drop")
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("EmitDrops returned %v, want context.Canceled", err)
	}
}

func TestAuditEvent(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d := Drop{Time: at, Sandbox: SandboxID{Num: 3, Name: "sbx"}, Reason: ReasonUDP, EtherType: 0x0800,
		Family: 4, Proto: 17, Src: mustAddr("198.18.0.2"), Dst: mustAddr("198.18.9.9"), DstPort: 443, Count: 12}
	e := AuditEvent(d)
	want := audit.Event{Schema: audit.SchemaVersion, Time: at, Kind: audit.KindDrop, Sandbox: "sbx",
		Verdict: "deny", Rule: "kernel:udp-not-dns", Reason: "udp-not-dns",
		Drop: &audit.Drop{Protocol: "udp", Source: "198.18.0.2", Dest: "198.18.9.9", Port: 443, Count: 12}}
	if diff := cmp.Diff(want, e); diff != "" {
		t.Errorf("AuditEvent (-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		d    Drop
		want string
	}{
		{Drop{EtherType: 0x0806}, "arp"},
		{Drop{EtherType: 0x86dd, Family: 6, Proto: 6}, "ipv6"},
		{Drop{EtherType: 0x0800, Family: 4, Proto: 1}, "icmp"},
		{Drop{EtherType: 0x0800, Family: 4, Proto: 47}, "ip-proto-47"},
		{Drop{EtherType: 0x88cc}, "ethertype-0x88cc"},
		{Drop{Reason: ReasonRateLimited}, "any"},
	} {
		if got := c.d.Protocol(); got != c.want {
			t.Errorf("Protocol(%+v) = %q, want %q", c.d, got, c.want)
		}
	}
	if got := Reason(200).String(); got != "reason-200" {
		t.Errorf("unknown reason: %q", got)
	}
}

func FuzzDecodeDrop(f *testing.F) {
	f.Add(make([]byte, 64))
	f.Add([]byte{1, 2, 3})
	ev := make([]byte, 64)
	ev[24] = 6
	f.Add(ev)
	f.Fuzz(func(t *testing.T, b []byte) {
		k, ok := decodeDrop(b)
		if ok != (len(b) >= 64) {
			t.Fatalf("ok=%v for %d bytes", ok, len(b))
		}
		if ok && k.family == 6 && !k.src.Is6() {
			t.Fatalf("family 6 without an IPv6 source: %+v", k)
		}
	})
}
