package serve

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"airlock/audit"
	"airlock/internal/agentwire"
	"airlock/runner"
)

// TestAttributor: one lookup per socket is shared (a query's A and AAAA),
// a new socket is a new lookup, an agent that does not answer becomes a
// timeout within lookupBound, and the runner's errors map to the event's
// attribution; before the runner starts every answer is no-agent.
func TestAttributor(t *testing.T) {
	at := newAttributor()
	local, remote := netip.MustParseAddrPort("198.18.0.2:40000"), netip.MustParseAddrPort("198.18.0.1:53")
	if a, _ := at.Attribute("sb", "udp", local, remote).Get(); a.Status != audit.AttrNoAgent {
		t.Fatalf("before the runner: %+v", a)
	}
	var calls atomic.Int32
	at.owners.Store(&sockOwners{lookup: func(ctx context.Context, id string, q runner.SockQuery) (agentwire.SockOwner, error) {
		calls.Add(1)
		switch q.Local.Port() {
		case 40000:
			return agentwire.SockOwner{Pid: 7, ExecID: "e1", Comm: "curl", Inode: 9}, nil
		case 40001:
			return agentwire.SockOwner{ExecID: "e2", Inferred: true}, nil
		case 40002:
			return agentwire.SockOwner{}, fmt.Errorf("sockowner: %w", runner.ErrNotFound)
		case 40003:
			return agentwire.SockOwner{}, fmt.Errorf("no agent: %w", runner.ErrUnsupported)
		case 40004:
			return agentwire.SockOwner{UID: 1000, Inode: 9}, nil
		}
		<-ctx.Done()
		return agentwire.SockOwner{}, ctx.Err()
	}})
	o1 := at.Attribute("sb", "udp", local, remote)
	o2 := at.Attribute("sb", "udp", local, remote)
	if o1 != o2 {
		t.Error("the same socket asked twice made two lookups")
	}
	want := map[uint16]audit.Attribution{
		40000: {ExecID: "e1", Pid: 7, Comm: "curl", Status: audit.AttrSocket},
		40001: {ExecID: "e2", Status: audit.AttrInferred},
		40002: {Status: audit.AttrExited},
		40003: {Status: audit.AttrNoAgent},
		40004: {Status: audit.AttrOtherUID},
		40005: {Status: audit.AttrTimeout},
	}
	start := time.Now()
	for port, w := range want {
		o := at.Attribute("sb", "udp", netip.AddrPortFrom(local.Addr(), port), remote)
		a, ok := o.Wait(2 * lookupBound)
		if !ok || a != w {
			t.Errorf("port %d: %+v (answered %v), want %+v", port, a, ok, w)
		}
	}
	if took := time.Since(start); took > 2*lookupBound {
		t.Errorf("the lookups took %s, over twice the bound %s", took, lookupBound)
	}
	if n := calls.Load(); n != 6 {
		t.Errorf("%d lookups, want 6 (one per socket)", n)
	}
}
