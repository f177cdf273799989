package bpf

import (
	"net/netip"
	"testing"
	"time"
)

// TestLockdownStopsTraffic: in real namespaces, the kill switch stops a
// sandbox's TCP and DNS (with lockdown drop events), lift restores them
// without re-attaching, and a per-sandbox block cuts only that sandbox.
func TestLockdownStopsTraffic(t *testing.T) {
	l := newLab(t)
	dst := netip.AddrPortFrom(l.world, 80)
	dns := netip.AddrPortFrom(l.world, 53)
	works := func(t *testing.T, n *ns) {
		t.Helper()
		l.expectProxy(t, n, dst, "proxy")
		if got, err := udpQuery(n, dns); err != nil || got != "dns-udp "+dns.String() {
			t.Fatalf("dns from %s: %q, %v", n.name, got, err)
		}
	}
	cut := func(t *testing.T, n *ns) {
		t.Helper()
		l.expectNoConnect(t, n, dst)
		if got, err := udpQueryTimeout(n, dns, 500*time.Millisecond); err == nil {
			t.Fatalf("dns from %s answered under lockdown: %q", n.name, got)
		}
	}
	works(t, l.sbxA)
	works(t, l.sbxB)

	t.Run("lockdown cuts every sandbox", func(t *testing.T) {
		before := l.stats(t, sandboxA).Dropped[ReasonLockdown]
		must(t, l.p.SetLockdown(true))
		cut(t, l.sbxA)
		cut(t, l.sbxB)
		if l.stats(t, sandboxA).Dropped[ReasonLockdown] <= before || l.stats(t, sandboxB).Dropped[ReasonLockdown] == 0 {
			t.Errorf("lockdown drops not counted: a %+v b %+v", l.stats(t, sandboxA), l.stats(t, sandboxB))
		}
		for _, name := range []string{"sandbox-a", "sandbox-b"} {
			l.drops.wait(t, "lockdown of "+name, func(d Drop) bool {
				return d.Reason == ReasonLockdown && d.Sandbox.Name == name && d.Protocol() == "tcp" && d.DstPort == 80
			})
		}
		l.worldSawNothing(t)
	})

	t.Run("lift restores without re-attach", func(t *testing.T) {
		must(t, l.p.SetLockdown(false))
		works(t, l.sbxA)
		works(t, l.sbxB)
	})

	t.Run("a blocked sandbox is cut, the other is not", func(t *testing.T) {
		must(t, l.p.BlockSandbox(sandboxA, BlockLockdown, true))
		cut(t, l.sbxA)
		works(t, l.sbxB)
		must(t, l.p.BlockSandbox(sandboxA, BlockLockdown, false))
		works(t, l.sbxA)
	})
}
