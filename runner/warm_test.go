package runner

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/audit"
	"airlock/internal/agentwire"
	"airlock/runner/agent"
)

// warmAgent is an in-sandbox agent in memory: every command exits 0 and
// its request (argv and env) is recorded.
type warmAgent struct {
	t  *transcript
	mu sync.Mutex
	n  int
}

func (a *warmAgent) Exec(_ context.Context, req agentwire.Request, _ agent.Streams, started func(agentwire.Started)) (*agentwire.Exit, error) {
	a.mu.Lock()
	a.n++
	pid := a.n
	a.mu.Unlock()
	a.t.add("agent.Exec %q env=%q", req.Argv, req.Env)
	started(agentwire.Started{Pid: pid})
	return &agentwire.Exit{Code: 0}, nil
}

func (a *warmAgent) Attach(context.Context, string, agent.Streams, func(agentwire.Started)) (*agentwire.Exit, error) {
	return &agentwire.Exit{}, nil
}
func (a *warmAgent) Do(_ context.Context, req agentwire.Request) (*agentwire.Result, error) {
	if req.Op == agentwire.OpMkdir {
		a.t.add("agent.Mkdir %s", req.Path)
	}
	return &agentwire.Result{}, nil
}
func (a *warmAgent) ReadFile(context.Context, string, int64, io.Writer) (*agentwire.FileInfo, error) {
	return nil, ErrUnsupported
}
func (a *warmAgent) WriteFile(_ context.Context, path string, mode uint32, size, _ int64, src io.Reader) (*agentwire.FileInfo, error) {
	b, err := io.ReadAll(src)
	a.t.add("agent.WriteFile %s mode=%o size=%d %q", path, mode, size, b)
	return nil, err
}
func (a *warmAgent) List(context.Context, string, int) ([]agentwire.FileInfo, error) {
	return nil, nil
}
func (a *warmAgent) Close() error { return nil }

// clock is a settable Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func warmHarness(t *testing.T, stateDir string, eng *fakeEngine, hn *fakeNet, tr *transcript, c *clock) *harness {
	bin := filepath.Join(t.TempDir(), "airlock-init")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := 0
	h := newHarness(t, func(cfg *Config) {
		cfg.AgentBinary = bin
		cfg.DialAgent = func(int) (Agent, error) { return &warmAgent{t: tr}, nil }
		cfg.Now = c.now
		cfg.newMemberID = func() string { m++; return fmt.Sprintf("m%011d", m) }
		if stateDir != "" {
			cfg.StateDir = stateDir
		}
		cfg.AttachNetwork = func(idx int, n SandboxNet) (func() error, error) {
			tr.add("hook.Attach ifindex=%d %s policy=%q addr=%s unbound=%t adopted=%t", idx, n.SandboxID, n.Policy, n.Addr, n.Unbound, n.Adopted)
			return func() error { tr.add("hook.Detach %s", n.SandboxID); return nil }, nil
		}
	})
	if eng != nil { // a second runner on the same engine and host (a restart)
		h.r.cfg.Engine, h.eng = eng, eng
		h.r.net, h.net = hn, hn
	}
	h.t, h.eng.t, h.net.t = tr, tr, tr
	return h
}

func waitReady(t *testing.T, r *Runner, key string, n int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if r.WarmStats().Ready[key] == n {
			return
		}
	}
	t.Fatalf("warm pool %q: %d ready, want %d", key, r.WarmStats().Ready[key], n)
}

// TestWarmPoolClaim: members are made ahead of demand with their veth
// attached unbound; a matching create claims one without a single engine
// call, binds policy, address and env through the hook and the agent,
// and the pool refills; a member is never handed out twice.
func TestWarmPoolClaim(t *testing.T) {
	tr := &transcript{}
	c := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	h := warmHarness(t, "", nil, nil, tr, c)
	if err := h.r.StartWarm(WarmConfig{Pools: []WarmSpec{{Image: "img", Size: 2}}, Refill: time.Hour}); err != nil {
		t.Fatal(err)
	}
	key := warmKey("img", "", Limits{}, false)
	waitReady(t, h.r, key, 2)
	if got := h.r.List(); len(got) != 0 {
		t.Fatalf("members are listed as sandboxes: %+v", got)
	}
	if !strings.Contains(tr.String(), "hook.Attach ifindex=101 m00000000001 policy=\"\" addr=198.18.0.2 unbound=true") {
		t.Fatalf("a member's path was not attached unbound:\n%s", tr)
	}
	if _, err := h.r.Exec(context.Background(), "m00000000001", ExecRequest{Argv: []string{"true"}}); err == nil {
		t.Fatal("a command ran in an unclaimed member")
	}
	tr.mu.Lock()
	mark := len(tr.lines)
	tr.mu.Unlock()
	var onID string
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "src"), 0o755)
	os.WriteFile(filepath.Join(ws, "src", "main.go"), []byte("package main"), 0o644)
	sb, err := h.r.Create(context.Background(), CreateRequest{Image: "img", Policy: "p", Env: map[string]string{"TASK": "1"},
		Lifetime: time.Hour, OnID: func(id string) error { onID = id; return nil },
		Workspace: Workspace{HostDir: ws, Mode: WorkspaceCopy}})
	if err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	claimLines := slices.Clone(tr.lines[mark:])
	tr.mu.Unlock()
	if i := slices.IndexFunc(claimLines, func(l string) bool { return strings.Contains(l, "claimed") }); i >= 0 {
		claimLines = claimLines[:i+1] // the refill the claim wakes comes after
	}
	if sb.ID != "m00000000001" || onID != sb.ID || sb.Policy != "p" || sb.State != audit.StateRunning || !sb.Deadline.Equal(c.now().Add(time.Hour)) {
		t.Fatalf("claimed %+v (OnID %q)", sb, onID)
	}
	for _, l := range claimLines {
		if strings.HasPrefix(l, "engine.") {
			t.Errorf("the claim called the engine: %s\n%s", l, strings.Join(claimLines, "\n"))
		}
	}
	for _, want := range []string{"agent.Mkdir /workspace/src", `agent.WriteFile /workspace/src/main.go mode=644 size=12 "package main"`} {
		if !slices.Contains(claimLines, want) {
			t.Errorf("the workspace was not copied in through the agent (%s):\n%s", want, strings.Join(claimLines, "\n"))
		}
	}
	if !slices.Contains(claimLines, `hook.Attach ifindex=101 m00000000001 policy="p" addr=198.18.0.2 unbound=false adopted=false`) {
		t.Errorf("the claim did not bind the path:\n%s", strings.Join(claimLines, "\n"))
	}
	if _, err := h.r.Exec(context.Background(), sb.ID, ExecRequest{Argv: []string{"env"}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tr.String(), `agent.Exec ["env"] env=["TASK=1"]`) {
		t.Errorf("the claim's env is not on the command:\n%s", tr)
	}
	waitReady(t, h.r, key, 2) // refilled at once: the claim wakes the refill
	sb2, err := h.r.Create(context.Background(), CreateRequest{Image: "img", Policy: "p"})
	if err != nil || sb2.ID == sb.ID {
		t.Fatalf("second claim: %+v %v", sb2, err)
	}
	if s := h.r.WarmStats(); s.Hits != 2 {
		t.Errorf("stats %+v", s)
	}
}

// TestWarmPoolMissAndRecycle: a create the pool cannot serve goes the cold
// way; members past the max age are recycled, never claimed.
func TestWarmPoolMissAndRecycle(t *testing.T) {
	tr := &transcript{}
	c := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	h := warmHarness(t, "", nil, nil, tr, c)
	if err := h.r.StartWarm(WarmConfig{Pools: []WarmSpec{{Image: "img", Size: 1}}, MaxAge: time.Minute, Refill: time.Hour}); err != nil {
		t.Fatal(err)
	}
	key := warmKey("img", "", Limits{}, false)
	waitReady(t, h.r, key, 1)
	for _, req := range []CreateRequest{
		{Image: "img", Policy: "p", CapAdd: []string{"NET_RAW"}},
		{Image: "other", Policy: "p"},
		{Image: "img", Policy: "p", ReadOnlyRoot: true},
	} {
		sb, err := h.r.Create(context.Background(), req)
		if err != nil || strings.HasPrefix(sb.ID, "m") {
			t.Fatalf("%+v: got %+v %v, want a cold create", req, sb, err)
		}
	}
	c.add(2 * time.Minute)
	sb, err := h.r.Create(context.Background(), CreateRequest{Image: "img", Policy: "p"})
	if err != nil || strings.HasPrefix(sb.ID, "m") {
		t.Fatalf("an expired member was claimed: %+v %v", sb, err)
	}
	h.r.warm.wake()
	for end := time.Now().Add(5 * time.Second); h.r.WarmStats().Recycled == 0 && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
	waitReady(t, h.r, key, 1)
	if s := h.r.WarmStats(); s.Recycled != 1 || s.Misses != 4 || s.Hits != 0 {
		t.Errorf("stats %+v", s)
	}
	if !strings.Contains(tr.String(), "net.DelLink alk-m000000000") {
		t.Errorf("the recycled member's veth stayed:\n%s", tr)
	}
}

// TestWarmPoolRestart: after a restart an unclaimed member is removed and
// a claimed one is adopted with the policy its claim bound.
func TestWarmPoolRestart(t *testing.T) {
	tr := &transcript{}
	c := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	h := warmHarness(t, "", nil, nil, tr, c)
	if err := h.r.StartWarm(WarmConfig{Pools: []WarmSpec{{Image: "img", Size: 2}}, Refill: time.Hour}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, h.r, warmKey("img", "", Limits{}, false), 2)
	sb, err := h.r.Create(context.Background(), CreateRequest{Image: "img", Policy: "p", Env: map[string]string{"TASK": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, h.r, warmKey("img", "", Limits{}, false), 2) // the claim woke the refill: let it finish before the "restart"
	h.r.Close()
	h2 := warmHarness(t, h.r.cfg.StateDir, h.eng, h.net, tr, c)
	mark := len(tr.lines)
	rep, err := h2.r.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rep.Removed)
	if !slices.Equal(rep.Adopted, []string{sb.ID}) || !slices.Equal(rep.Removed, []string{"airlock-m00000000002", "airlock-m00000000003"}) {
		t.Fatalf("reconcile %+v", rep)
	}
	got, err := h2.r.Get(sb.ID)
	if err != nil || got.Policy != "p" {
		t.Fatalf("adopted %+v %v", got, err)
	}
	if !slices.Contains(tr.lines[mark:], `hook.Attach ifindex=200 m00000000001 policy="p" addr=198.18.0.2 unbound=false adopted=true`) {
		t.Errorf("the claimed member was not re-bound:\n%s", strings.Join(tr.lines[mark:], "\n"))
	}
	if _, err := h2.r.Exec(context.Background(), sb.ID, ExecRequest{Argv: []string{"env"}}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(tr.String(), `agent.Exec ["env"] env=["TASK=1"]`); n != 1 {
		t.Errorf("after the restart the claim's env is not on the command (%d):\n%s", n, tr)
	}
}

// TestWarmPoolDropsDeadMembers: a member whose container stopped outside
// airlock is removed by the watch and never claimed.
func TestWarmPoolDropsDeadMembers(t *testing.T) {
	tr := &transcript{}
	c := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	h := warmHarness(t, "", nil, nil, tr, c)
	if err := h.r.StartWarm(WarmConfig{Pools: []WarmSpec{{Image: "img", Size: 1}}, Refill: time.Hour}); err != nil {
		t.Fatal(err)
	}
	key := warmKey("img", "", Limits{}, false)
	waitReady(t, h.r, key, 1)
	m := h.r.idleMembers()[0]
	h.eng.mu.Lock()
	h.eng.containers[m.info.ContainerID].running = false
	h.eng.mu.Unlock()
	h.r.checkContainers()
	for end := time.Now().Add(5 * time.Second); h.r.known(m.info.ID) && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
	if h.r.known(m.info.ID) || h.r.WarmStats().Recycled != 1 {
		t.Fatalf("the dead member %s stayed (stats %+v)", m.info.ID, h.r.WarmStats())
	}
	sb, err := h.r.Create(context.Background(), CreateRequest{Image: "img", Policy: "p"})
	if err != nil || sb.ID == m.info.ID {
		t.Fatalf("create %+v %v", sb, err)
	}
}
