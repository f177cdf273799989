package bpf

import (
	"context"
	"net"
	"testing"

	"github.com/cilium/ebpf"
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
	if err := p.objs.AlkConfig.Update(uint32(1), configOf(unitNet), ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	p.ensureStats(unitNet.Sandbox.Num)
	if withSockets {
		ctx := context.Background()
		l, err := ListenTCP(ctx, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		u, err := ListenUDP(ctx, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { u.Close() })
		d, err := ListenTCP(ctx, "127.0.0.1:0")
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
