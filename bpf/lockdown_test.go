package bpf

import (
	"context"
	"errors"
	"testing"
	"time"
)

// lockdownFrames are frames that pass (ARP for the gateway) or reach a
// socket (DNS, TCP) without a lockdown: under one, each must be dropped
// with reason lockdown.
func lockdownFrames() []branch {
	var out []branch
	for _, b := range branches() {
		switch b.name {
		case "arp request for gateway", "udp 53 to foreign resolver", "tcp syn to world", "udp other port":
			out = append(out, b)
		}
	}
	return out
}

// expectVerdicts runs every frame once and checks its verdict and drop
// reason (want: ReasonLockdown, or each branch's own outcome when
// ReasonNone).
func expectVerdicts(t *testing.T, p *Path, frames []branch, want Reason) {
	t.Helper()
	for _, b := range frames {
		before, _ := p.Stats(unitNet.Sandbox.Num)
		ret := runOnce(t, p, b.frame)
		after, _ := p.Stats(unitNet.Sandbox.Num)
		wantAct, wantReason := b.act, b.reason
		if want == ReasonLockdown {
			wantAct, wantReason = actShot, ReasonLockdown
		}
		if ret != wantAct {
			t.Errorf("%s: verdict %d, want %d (%s)", b.name, ret, wantAct, fmtStats(after))
			continue
		}
		if wantAct == actShot && after.Dropped[wantReason]-before.Dropped[wantReason] != 1 {
			t.Errorf("%s: want one %v drop, got %s", b.name, wantReason, fmtStats(after))
		}
	}
}

func TestProgramLockdown(t *testing.T) {
	requireRoot(t)
	p := unitPath(t, true)
	frames := lockdownFrames()
	if len(frames) != 4 {
		t.Fatalf("found %d of the 4 frames", len(frames))
	}
	expectVerdicts(t, p, frames, ReasonNone)

	must(t, p.SetLockdown(true))
	if on, err := p.Lockdown(); err != nil || !on {
		t.Fatalf("Lockdown() = %v, %v after SetLockdown(true)", on, err)
	}
	expectVerdicts(t, p, frames, ReasonLockdown)
	must(t, p.SetLockdown(false))
	expectVerdicts(t, p, frames, ReasonNone)

	// Another sandbox's block leaves this one alone.
	must(t, p.BlockSandbox(unitNet.Sandbox.Num+1, BlockLockdown, true))
	expectVerdicts(t, p, frames, ReasonNone)
	must(t, p.BlockSandbox(unitNet.Sandbox.Num+1, BlockLockdown, false))

	// This sandbox's block, held by two holders: lifting one keeps it cut.
	num := unitNet.Sandbox.Num
	must(t, p.BlockSandbox(num, BlockLockdown, true))
	expectVerdicts(t, p, frames, ReasonLockdown)
	must(t, p.BlockSandbox(num, BlockPause, true))
	must(t, p.BlockSandbox(num, BlockLockdown, false))
	if b, _ := p.SandboxBlock(num); b != BlockPause {
		t.Fatalf("block = %b, want pause only", b)
	}
	expectVerdicts(t, p, frames, ReasonLockdown)
	must(t, p.BlockSandbox(num, BlockPause, false))
	expectVerdicts(t, p, frames, ReasonNone)

	for _, bad := range []uint32{0, MaxSandboxes} {
		if err := p.BlockSandbox(bad, BlockLockdown, true); !errors.Is(err, ErrBadSandbox) {
			t.Errorf("BlockSandbox(%d): %v, want ErrBadSandbox", bad, err)
		}
	}
}

// A lockdown drop is reported like any other, with the packet's fields.
func TestLockdownDropEvent(t *testing.T) {
	requireRoot(t)
	p := unitPath(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := p.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	must(t, p.SetLockdown(true))
	frame := ethFrame(macSandbox, 0x0800, ipv4Packet(ipOpts{proto: 6, src: unitNet.Addr, dst: mustAddr("198.18.200.10")}, tcpSegment(40000, 443, 0x02)))
	if ret := runOnce(t, p, frame); ret != actShot {
		t.Fatalf("verdict %d under lockdown", ret)
	}
	select {
	case d := <-ch:
		if d.Reason != ReasonLockdown || d.Sandbox.Name != "unit" || d.DstPort != 443 || d.Protocol() != "tcp" {
			t.Errorf("drop %+v, want a lockdown drop of tcp to 443 by unit", d)
		}
		if e := AuditEvent(d); e.Rule != "kernel:lockdown" {
			t.Errorf("audit rule %q, want kernel:lockdown", e.Rule)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no drop event")
	}
}

// Detach and Reconcile retire a sandbox id's block: a new sandbox given the
// id starts with the network.
func TestDetachClearsBlock(t *testing.T) {
	requireRoot(t)
	p := unitPath(t, true)
	num := unitNet.Sandbox.Num
	must(t, p.BlockSandbox(num, BlockLockdown, true))
	must(t, p.Detach(Handle{Ifindex: 999999, Sandbox: unitNet.Sandbox}))
	if b, _ := p.SandboxBlock(num); b != 0 {
		t.Errorf("block %b survived Detach", b)
	}
	must(t, p.BlockSandbox(num+1, BlockLockdown, true))
	if _, err := p.Reconcile(nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := p.SandboxBlock(num + 1); b != 0 {
		t.Errorf("block %b of a sandbox with no attachment survived Reconcile", b)
	}
}
