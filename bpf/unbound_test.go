package bpf

import (
	"net/netip"
	"testing"
	"time"
)

// TestUnboundInterfaceDropsUntilBound: in real namespaces, an interface
// attached unbound (a warm pool member) gets nothing through — no TCP to
// the proxy, no DNS, nothing to the world — and every frame is counted as
// an unconfigured-interface drop of sandbox 0; one Attach binds it and
// the same sandbox works at once.
func TestUnboundInterfaceDropsUntilBound(t *testing.T) {
	l := newLab(t)
	dst := netip.AddrPortFrom(l.world, 80)
	dns := netip.AddrPortFrom(l.world, 53)
	if _, err := l.p.AttachUnbound(l.epA.hostIdx, "sandbox-a"); err != nil {
		t.Fatalf("AttachUnbound: %+v", err)
	}
	before, err := l.p.Stats(0)
	if err != nil {
		t.Fatal(err)
	}
	l.expectNoConnect(t, l.sbxA, dst)
	if got, err := udpQueryTimeout(l.sbxA, dns, 500*time.Millisecond); err == nil {
		t.Fatalf("dns from an unbound interface answered: %q", got)
	}
	l.worldSawNothing(t)
	after, err := l.p.Stats(0)
	if err != nil {
		t.Fatal(err)
	}
	if after.Dropped[ReasonNoConfig] <= before.Dropped[ReasonNoConfig] {
		t.Errorf("no unconfigured-interface drops counted: %s", fmtStats(after))
	}
	l.expectProxy(t, l.sbxB, dst, "proxy") // the bound neighbour is unaffected

	l.hA = l.attach(t, l.epA, SandboxID{Num: sandboxA, Name: "sandbox-a"})
	l.expectProxy(t, l.sbxA, dst, "proxy")
	if got, err := udpQuery(l.sbxA, dns); err != nil || got != "dns-udp "+dns.String() {
		t.Fatalf("dns after binding: %q, %v", got, err)
	}
}
