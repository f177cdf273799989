package bpf

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// TestDropEventFields pins down what each drop reports: the fields the
// program had checked before the drop and nothing it had not (no ports from
// a fragment's payload or an unchecked header, no addresses before the
// header was known to be there). The program builds events out of line by
// parsing the packet again; this is the contract that parse must keep.
func TestDropEventFields(t *testing.T) {
	requireRoot(t)
	p := unitPath(t, true) // TCP/DNS branches end in assign-failed, with ports
	rd, err := ringbuf.NewReader(p.objs.AlkEvents)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()

	sb, gw, world, other := unitNet.Addr, unitNet.Gateway, mustAddr("198.18.200.10"), mustAddr("198.18.7.3")
	v4 := func(proto uint8, src, dst netip.Addr, sport, dport uint16) event {
		return event{ethertype: 0x0800, family: 4, proto: proto, src: src, dst: dst, sport: sport, dport: dport}
	}
	arp := func(src, dst netip.Addr, op uint16) event {
		return event{ethertype: 0x0806, src: src, dst: dst, dport: op}
	}
	want := map[string]event{
		"arp request for other address":   arp(sb, other, 1),
		"arp with spoofed sender address": arp(other, gw, 1),
		"spoofed source mac":              {ethertype: 0x0800, mac: [6]byte{2, 0xbb, 0, 0, 0, 9}},
		"spoofed source address":          v4(6, other, world, 0, 0),
		"tcp syn to world":                v4(6, sb, world, 40000, 443),
		"udp 53 to foreign resolver":      v4(17, sb, world, 40000, 53),
		"tcp 53 to foreign resolver":      v4(6, sb, world, 40000, 53),
		"udp other port":                  v4(17, sb, world, 40000, 123),
		"quic-shaped udp 443":             v4(17, sb, world, 40000, 443),
		"icmp echo to world":              v4(1, sb, world, 0, 8),
		"icmp echo to gateway":            v4(1, sb, gw, 0, 8),
		"gre":                             v4(47, sb, world, 0, 0),
		"sctp":                            v4(132, sb, world, 0, 0),
		"ipv6 tcp": {ethertype: 0x86dd, family: 6, proto: 6,
			src: mustAddr("fd00::2"), dst: mustAddr("2001:db8::1")},
		"first fragment":    v4(17, sb, world, 0, 0),
		"later fragment":    v4(17, sb, world, 0, 0),
		"ip options":        v4(6, sb, world, 0, 0),
		"truncated tcp":     v4(6, sb, world, 40000, 443),
		"other ethertype":   {ethertype: 0x88cc},
		"vlan tag in frame": {ethertype: 0x8100},
	}
	for _, b := range branches() {
		if b.act == actOK {
			continue
		}
		w, ok := want[b.name]
		if !ok {
			t.Errorf("%s: no expected event in this test", b.name)
			continue
		}
		w.sandbox, w.reason = unitNet.Sandbox.Num, b.reason
		t.Run(b.name, func(t *testing.T) {
			runOnce(t, p, b.frame)
			if got := readEvent(t, rd); got != w {
				t.Errorf("event\n got %+v\nwant %+v", got, w)
			}
		})
	}

	t.Run("ipv4 with bad version", func(t *testing.T) {
		pkt := ipv4Packet(ipOpts{proto: 6, src: sb, dst: world}, tcpSegment(40000, 443, 2))
		pkt[0] = 0x65
		runOnce(t, p, ethFrame(macSandbox, 0x0800, pkt))
		w := v4(6, sb, world, 0, 0)
		w.sandbox, w.reason = unitNet.Sandbox.Num, ReasonMalformed
		if got := readEvent(t, rd); got != w {
			t.Errorf("event\n got %+v\nwant %+v", got, w)
		}
	})
	t.Run("arp with spoofed sender mac", func(t *testing.T) {
		runOnce(t, p, ethFrame(macSandbox, 0x0806, arpPacket(1, []byte{2, 0xbb, 0, 0, 0, 9}, sb, gw)))
		w := arp(sb, gw, 1)
		w.sandbox, w.reason, w.mac = unitNet.Sandbox.Num, ReasonSpoofedMAC, [6]byte{2, 0xbb, 0, 0, 0, 9}
		if got := readEvent(t, rd); got != w {
			t.Errorf("event\n got %+v\nwant %+v", got, w)
		}
	})
	t.Run("udp header cut short", func(t *testing.T) {
		runOnce(t, p, ethFrame(macSandbox, 0x0800, ipv4Packet(ipOpts{proto: 17, src: sb, dst: world},
			udpDatagram(40000, 53, nil)[:6])))
		w := v4(17, sb, world, 40000, 53)
		w.sandbox, w.reason = unitNet.Sandbox.Num, ReasonMalformed
		if got := readEvent(t, rd); got != w {
			t.Errorf("event\n got %+v\nwant %+v", got, w)
		}
	})
	t.Run("ports cut short", func(t *testing.T) {
		runOnce(t, p, ethFrame(macSandbox, 0x0800, ipv4Packet(ipOpts{proto: 6, src: sb, dst: world},
			tcpSegment(40000, 443, 2)[:3])))
		w := v4(6, sb, world, 0, 0)
		w.sandbox, w.reason = unitNet.Sandbox.Num, ReasonMalformed
		if got := readEvent(t, rd); got != w {
			t.Errorf("event\n got %+v\nwant %+v", got, w)
		}
	})
}

// event is a drop record as the program wrote it, sport included.
type event struct {
	sandbox      uint32
	reason       Reason
	ethertype    uint16
	family       int
	proto        uint8
	src, dst     netip.Addr
	sport, dport uint16
	mac          [6]byte // the refused source MAC (spoofed-mac only)
}

func readEvent(t *testing.T, rd *ringbuf.Reader) event {
	t.Helper()
	rd.SetDeadline(time.Now().Add(2 * time.Second))
	rec, err := rd.Read()
	if err != nil {
		t.Fatalf("no drop event: %v", err)
	}
	k, ok := decodeDrop(rec.RawSample)
	if !ok {
		t.Fatalf("short drop event: %d bytes", len(rec.RawSample))
	}
	if rd.AvailableBytes() != 0 {
		t.Errorf("more than one event for one packet")
	}
	return event{sandbox: k.sandbox, reason: k.reason, ethertype: k.ethertype, family: int(k.family),
		proto: k.proto, src: k.src, dst: k.dst,
		sport: binary.LittleEndian.Uint16(rec.RawSample[18:]), dport: k.dport, mac: k.mac}
}
