package bpf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"airlock/audit"

	"github.com/cilium/ebpf/ringbuf"
)

// Reason is why the kernel dropped a packet (enum drop_reason in c/steer.c).
type Reason uint8

const (
	ReasonNone Reason = iota
	ReasonNoConfig
	ReasonVLAN
	ReasonMalformed
	ReasonEtherType
	ReasonSpoofedMAC
	ReasonARP
	ReasonIPv6
	ReasonIPOptions
	ReasonFragment
	ReasonSpoofedSource
	ReasonUDP
	ReasonICMP
	ReasonProtocol
	ReasonNoProxy
	ReasonNoDNS
	ReasonAssign
	// ReasonLockdown: the kill switch (SetLockdown) or a block on this
	// sandbox (BlockSandbox) was on.
	ReasonLockdown
	reasonMax
	// ReasonRateLimited stands for drops that were counted in the kernel but
	// not reported one by one (rate limit or a full ring buffer).
	ReasonRateLimited Reason = 255
)

var reasonNames = [...]string{
	ReasonNone:          "none",
	ReasonNoConfig:      "unconfigured-interface",
	ReasonVLAN:          "vlan",
	ReasonMalformed:     "malformed",
	ReasonEtherType:     "ethertype",
	ReasonSpoofedMAC:    "spoofed-mac",
	ReasonARP:           "arp",
	ReasonIPv6:          "ipv6",
	ReasonIPOptions:     "ip-options",
	ReasonFragment:      "fragment",
	ReasonSpoofedSource: "spoofed-source",
	ReasonUDP:           "udp-not-dns",
	ReasonICMP:          "icmp",
	ReasonProtocol:      "ip-protocol",
	ReasonNoProxy:       "no-proxy-listener",
	ReasonNoDNS:         "no-dns-socket",
	ReasonAssign:        "assign-failed",
	ReasonLockdown:      "lockdown",
}

func (r Reason) String() string {
	if r == ReasonRateLimited {
		return "rate-limited"
	}
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason-%d", r)
}

// Drop is one aggregated drop record: Count packets with the same sandbox,
// reason, protocol, addresses and destination port within one flush.
type Drop struct {
	Time      time.Time // when the record was flushed
	Sandbox   SandboxID
	Ifindex   int
	Reason    Reason
	EtherType uint16
	Family    int   // 4, 6, or 0 (no IP header)
	Proto     uint8 // IP protocol / IPv6 next header
	Src, Dst  netip.Addr
	DstPort   uint16 // TCP/UDP port, ICMP type, ARP operation
	// MAC is the source MAC a spoofed-mac drop refused (the Ethernet
	// source, or an ARP body's sender); nil for other reasons.
	MAC   net.HardwareAddr
	Count uint64
}

// Protocol names the packet's protocol for humans and audit records.
func (d Drop) Protocol() string {
	switch {
	case d.Reason == ReasonRateLimited:
		return "any"
	case d.EtherType == 0x0806:
		return "arp"
	case d.Family == 6:
		return "ipv6"
	case d.Family == 4:
		switch d.Proto {
		case 1:
			return "icmp"
		case 6:
			return "tcp"
		case 17:
			return "udp"
		}
		return fmt.Sprintf("ip-proto-%d", d.Proto)
	}
	return fmt.Sprintf("ethertype-%#04x", d.EtherType)
}

// AuditEvent turns d into the audit record serve emits.
func AuditEvent(d Drop) audit.Event {
	e := audit.New(audit.KindDrop, d.Sandbox.Name)
	if !d.Time.IsZero() {
		e.Time = d.Time.UTC()
	}
	e.Verdict = "deny"
	e.Rule = "kernel:" + d.Reason.String()
	e.Reason = d.Reason.String()
	e.Drop = &audit.Drop{
		Protocol: d.Protocol(),
		Source:   addrString(d.Src),
		Dest:     addrString(d.Dst),
		Port:     d.DstPort,
		Count:    d.Count,
	}
	if d.MAC != nil {
		e.Drop.MAC = d.MAC.String()
	}
	return e
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

type dropKey struct {
	sandbox   uint32
	ifindex   uint32
	reason    Reason
	ethertype uint16
	family    uint8
	proto     uint8
	src, dst  netip.Addr
	dport     uint16
	mac       [6]byte
}

// maxKeys bounds the aggregation table; beyond it records merge per sandbox
// and reason with the addresses dropped.
const maxKeys = 4096

// Events reads the drop ring buffer until ctx ends and sends aggregated
// drops, one per distinct key per FlushInterval, plus one ReasonRateLimited
// record per sandbox for drops counted but not reported. Only one reader
// should run per Path. The channel is closed when ctx ends or reading fails.
func (p *Path) Events(ctx context.Context) (<-chan Drop, error) {
	rd, err := ringbuf.NewReader(p.objs.AlkEvents)
	if err != nil {
		return nil, fmt.Errorf("bpf: open drop ring buffer: %w", err)
	}
	out := make(chan Drop, 256)
	go func() {
		<-ctx.Done()
		rd.Close()
	}()
	// The baseline is read now, so drops after Events returns are reported.
	go p.readEvents(ctx, rd, p.unreportedCounts(), out)
	return out, nil
}

func (p *Path) readEvents(ctx context.Context, rd *ringbuf.Reader, unreported map[uint32]uint64, out chan<- Drop) {
	defer close(out)
	agg := map[dropKey]uint64{}
	next := time.Now().Add(p.opts.FlushInterval)
	var rec ringbuf.Record
	for {
		rd.SetDeadline(next)
		err := rd.ReadInto(&rec)
		switch {
		case err == nil:
			if k, ok := decodeDrop(rec.RawSample); ok {
				p.addDrop(agg, k)
			}
			continue
		case errors.Is(err, os.ErrDeadlineExceeded):
		default:
			if ctx.Err() == nil {
				p.log.Error("bpf: drop events stopped", "err", err)
			}
			return
		}
		if !p.flush(ctx, agg, unreported, out) {
			return
		}
		next = time.Now().Add(p.opts.FlushInterval)
	}
}

func (p *Path) addDrop(agg map[dropKey]uint64, k dropKey) {
	if _, ok := agg[k]; !ok && len(agg) >= maxKeys {
		k = dropKey{sandbox: k.sandbox, ifindex: k.ifindex, reason: k.reason, family: k.family, proto: k.proto}
	}
	agg[k]++
}

func decodeDrop(b []byte) (dropKey, bool) {
	if len(b) < 64 {
		return dropKey{}, false
	}
	le := binary.LittleEndian
	k := dropKey{
		sandbox:   le.Uint32(b[8:]),
		ifindex:   le.Uint32(b[12:]),
		ethertype: le.Uint16(b[16:]),
		dport:     le.Uint16(b[20:]),
		proto:     b[22],
		reason:    Reason(b[23]),
		family:    b[24],
		mac:       [6]byte(b[25:31]),
	}
	switch {
	case k.family == 6:
		k.src = netip.AddrFrom16([16]byte(b[32:48]))
		k.dst = netip.AddrFrom16([16]byte(b[48:64]))
	case k.family == 4 || k.ethertype == 0x0806:
		k.src = netip.AddrFrom4([4]byte(b[32:36]))
		k.dst = netip.AddrFrom4([4]byte(b[48:52]))
	}
	return k, true
}

// unreportedCounts reads suppressed+lost for every sandbox this Path knows
// and for id 0.
func (p *Path) unreportedCounts() map[uint32]uint64 {
	p.mu.Lock()
	nums := []uint32{0}
	for n := range p.names {
		nums = append(nums, n)
	}
	p.mu.Unlock()
	m := map[uint32]uint64{}
	for _, num := range nums {
		if s, err := p.Stats(num); err == nil {
			m[num] = s.EventsSuppressed + s.EventsLost
		}
	}
	return m
}

func (p *Path) flush(ctx context.Context, agg map[dropKey]uint64, unreported map[uint32]uint64, out chan<- Drop) bool {
	now := time.Now()
	var batch []Drop
	for k, n := range agg {
		batch = append(batch, p.dropOf(k, n, now))
	}
	clear(agg)
	for num, n := range p.unreportedCounts() {
		if n > unreported[num] {
			batch = append(batch, Drop{Time: now, Sandbox: p.sandbox(num), Reason: ReasonRateLimited, Count: n - unreported[num]})
		}
		unreported[num] = n
	}
	for _, d := range batch {
		select {
		case out <- d:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

func (p *Path) sandbox(num uint32) SandboxID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return SandboxID{Num: num, Name: p.names[num]}
}

func (p *Path) dropOf(k dropKey, n uint64, now time.Time) Drop {
	d := Drop{
		Time: now, Sandbox: p.sandbox(k.sandbox), Ifindex: int(k.ifindex), Reason: k.reason,
		EtherType: k.ethertype, Family: int(k.family), Proto: k.proto,
		Src: k.src, Dst: k.dst, DstPort: k.dport, Count: n,
	}
	if k.mac != ([6]byte{}) {
		d.MAC = net.HardwareAddr(k.mac[:])
	}
	return d
}

// EmitDrops forwards every aggregated drop to em as an audit event (see
// AuditEvent) until ctx ends. It is the one-line wiring for serve.
func (p *Path) EmitDrops(ctx context.Context, em audit.Emitter) error {
	ch, err := p.Events(ctx)
	if err != nil {
		return err
	}
	for d := range ch {
		em.Emit(AuditEvent(d))
	}
	return ctx.Err()
}
