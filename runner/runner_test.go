package runner

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"airlock/audit"
)

var update = flag.Bool("update", false, "rewrite the golden files")

type harness struct {
	r      *Runner
	t      *transcript
	eng    *fakeEngine
	net    *fakeNet
	mu     sync.Mutex
	events []audit.Event
}

func newHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	h := &harness{t: &transcript{}}
	h.eng = newFakeEngine(h.t)
	h.net = &fakeNet{t: h.t, links: map[string]string{}}
	n := 0
	cfg := Config{
		Engine: h.eng,
		Emitter: audit.EmitterFunc(func(e audit.Event) {
			h.mu.Lock()
			h.events = append(h.events, e)
			h.mu.Unlock()
			detail := ""
			if e.Lifecycle != nil {
				detail = e.Lifecycle.Stage + " " + e.Lifecycle.Address + " state=" + string(e.Lifecycle.State)
				if p := e.Lifecycle.Principal; p != "" {
					detail += " by=" + p
				}
			}
			if e.Exec != nil {
				detail = fmt.Sprintf("%s %q", e.Exec.Stage, e.Exec.Argv)
				if e.Exec.ExitCode != nil {
					detail += fmt.Sprintf(" exit=%d timed_out=%t killed=%t", *e.Exec.ExitCode, e.Exec.TimedOut, e.Exec.Killed)
				}
				if p := e.Exec.Principal; p != "" {
					detail += " by=" + p
				}
			}
			h.t.add("event %s sandbox=%s %s", e.Kind, e.Sandbox, detail)
		}),
		Instance:    "test",
		StateDir:    t.TempDir(),
		SandboxUser: "root",
		Pool:        netip.MustParsePrefix("198.18.0.0/24"),
		AttachNetwork: func(idx int, n SandboxNet) (func() error, error) {
			h.t.add("hook.Attach ifindex=%d %s %s addr=%s mac=%s gw=%s adopted=%t", idx, n.SandboxID, n.HostIfName, n.Addr, n.MAC, n.Gateway, n.Adopted)
			return func() error { h.t.add("hook.Detach %s", n.SandboxID); return nil }, nil
		},
		CACertPEM: []byte("-----BEGIN CERTIFICATE-----\nAIRLOCK\n-----END CERTIFICATE-----\n"),
		ProxyURL:  "http://198.18.0.1:3128",
		Cgroups:   &CgroupSupport{},
		NewID:     func() string { n++; return fmt.Sprintf("%012d", n) },
		Now:       func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) },
		hostNet:   h.net,
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	h.r = r
	return h
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", name, diff)
	}
}

// TestLifecycleTranscript: a create, an exec and a destroy, call by call;
// every change of state is a lifecycle record with the state it enters,
// and each record names the principal whose request it is.
func TestLifecycleTranscript(t *testing.T) {
	h := newHarness(t, nil)
	ctx := audit.WithPrincipal(context.Background(), "alice")
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "main.py"), []byte("print('hi')\n"), 0o644)
	sb, err := h.r.Create(ctx, CreateRequest{Image: "localhost/airlock/busybox:1", Policy: "dev",
		Env: map[string]string{"TASK": "t1"}, Workspace: Workspace{HostDir: ws, Mode: WorkspaceCopy},
		Setup: [][]string{{"true"}}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res, err := h.r.Exec(ctx, sb.ID, ExecRequest{Argv: []string{"echo", "hi"}, Stdout: &out, Env: map[string]string{"B": "2", "A": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "hi\n" || out.String() != "hi\n" || res.ExitCode != 0 {
		t.Errorf("exec: stdout %q streamed %q exit %d", res.Stdout, out.String(), res.ExitCode)
	}
	if err := h.r.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	golden(t, "lifecycle.golden", h.t.String())

	// The invariants the transcript shows, checked directly too.
	attach, move, firstExec := h.t.index("hook.Attach"), h.t.index("net.MoveIn"), h.t.index("engine.Exec")
	if attach < 0 || move < attach || firstExec < move {
		t.Errorf("order: attach %d, move %d, first exec %d; want attach < move < exec", attach, move, firstExec)
	}
	if _, err := h.r.Get(sb.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after destroy: %v, want ErrNotFound", err)
	}
	if len(h.net.links) != 0 {
		t.Errorf("veths left: %v", h.net.links)
	}
	if len(h.r.pool.used) != 0 {
		t.Errorf("addresses left in use: %v", h.r.pool.used)
	}
}

func TestBuildSpecGolden(t *testing.T) {
	in := SpecInput{Instance: "prod", ID: "abc123def456",
		Req: CreateRequest{Image: "localhost/airlock/debian:12", Policy: "ci", ReadOnlyRoot: true,
			CapAdd:    []string{"net_admin", "CAP_NET_RAW", "NET_ADMIN"},
			Env:       map[string]string{"TASK": "build", "HOME": "/home/agent"},
			Workspace: Workspace{HostDir: "/srv/work/abc", Mode: WorkspaceBind},
			Limits:    Limits{NoFile: 1024, FileSizeBytes: 1 << 30, MemoryBytes: 1 << 30, Procs: 100}},
		Address: netip.MustParseAddr("198.18.0.7"), Gateway: netip.MustParseAddr("198.18.0.1"),
		ProxyURL: "http://198.18.0.1:3128", ResolvConf: "/var/lib/airlock/resolv.conf",
		CABundle: "/var/lib/airlock/ca/0123.pem", Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Deadline: time.Date(2026, 1, 2, 4, 4, 5, 0, time.UTC), ExecTimeout: time.Minute,
		Cgroups: CgroupSupport{Memory: false}}
	b, err := json.MarshalIndent(BuildSpec(in), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "spec.golden", string(b)+"\n")

	// What the golden file shows, asserted: no host env, hardening on.
	s := BuildSpec(in)
	if s.Env["HOME"] != "/home/agent" || s.Env["SSL_CERT_FILE"] != CABundlePath || s.Env["AIRLOCK_SANDBOX"] != in.ID {
		t.Errorf("env %v", s.Env)
	}
	if !s.NetworkNone || !s.NoNewPrivileges || s.CapDrop[0] != "ALL" || s.MemoryBytes != 0 {
		t.Errorf("hardening: %+v", s)
	}
}

func TestCapAdd(t *testing.T) {
	got, err := NormalizeCapAdd([]string{"net_raw", " CAP_NET_ADMIN", "NET_RAW"})
	if err != nil || !slices.Equal(got, []string{"CAP_NET_ADMIN", "CAP_NET_RAW"}) {
		t.Errorf("NormalizeCapAdd: %v %v", got, err)
	}
	for _, bad := range []string{"SYS_ADMIN", "CAP_SYS_PTRACE", "ALL", "", "NET_RAW2"} {
		_, err := NormalizeCapAdd([]string{bad})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("%q is not allowed", bad)) ||
			!strings.Contains(err.Error(), "only NET_RAW and NET_ADMIN") {
			t.Errorf("NormalizeCapAdd(%q): %v", bad, err)
		}
	}
	// The default spec has neither; a request with both gets both, once.
	def := BuildSpec(SpecInput{ID: "x", Req: CreateRequest{Image: "i", Policy: "p"}})
	if slices.Contains(def.CapAdd, "CAP_NET_RAW") || slices.Contains(def.CapAdd, "CAP_NET_ADMIN") || def.Labels[LabelCapAdd] != "" {
		t.Errorf("default caps %v labels %v", def.CapAdd, def.Labels)
	}
	s := BuildSpec(SpecInput{ID: "x", Req: CreateRequest{Image: "i", Policy: "p", CapAdd: []string{"NET_ADMIN", "net_raw", "NET_RAW"}}})
	want := append(DefaultCaps(), "CAP_NET_ADMIN", "CAP_NET_RAW")
	if !slices.Equal(s.CapAdd, want) || s.CapDrop[0] != "ALL" || s.Labels[LabelCapAdd] != "CAP_NET_ADMIN,CAP_NET_RAW" {
		t.Errorf("caps %v drop %v label %q", s.CapAdd, s.CapDrop, s.Labels[LabelCapAdd])
	}
	// Create reports them in the sandbox.
	h := newHarness(t, nil)
	sb, err := h.r.Create(context.Background(), CreateRequest{Image: "img", Policy: "p", CapAdd: []string{"net_raw"}})
	if err != nil || !slices.Equal(sb.CapAdd, []string{"CAP_NET_RAW"}) {
		t.Errorf("Create: %v %v", sb.CapAdd, err)
	}
}

func TestBuildSpecNeverInheritsHostEnv(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_SECRET", "s3cret")
	s := BuildSpec(SpecInput{ID: "x", Req: CreateRequest{Image: "i", Policy: "p"}})
	for k, v := range s.Env {
		if k == "AIRLOCK_TEST_SECRET" || strings.Contains(v, "s3cret") {
			t.Fatalf("host environment leaked into the sandbox: %s=%s", k, v)
		}
	}
}

func TestCreateFailureCleansUp(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.AttachNetwork = func(int, SandboxNet) (func() error, error) { return nil, errors.New("bpf attach refused") }
	})
	_, err := h.r.Create(context.Background(), CreateRequest{Image: "img", Policy: "p"})
	if err == nil || !strings.Contains(err.Error(), "bpf attach refused") {
		t.Fatalf("Create: %v, want the hook's error", err)
	}
	if h.t.index("net.MoveIn") >= 0 || h.t.index("engine.Exec") >= 0 {
		t.Errorf("the peer was moved in or a command ran although the path failed:\n%s", h.t)
	}
	if len(h.eng.containers) != 0 || len(h.net.links) != 0 || len(h.r.pool.used) != 0 || len(h.r.List()) != 0 {
		t.Errorf("left behind: containers %v links %v addresses %v sandboxes %v", h.eng.containers, h.net.links, h.r.pool.used, h.r.List())
	}
	if h.t.index("event lifecycle sandbox=000000000001 failed") < 0 {
		t.Errorf("no failed event:\n%s", h.t)
	}
}

func TestCreateRejectsBadRequests(t *testing.T) {
	h := newHarness(t, nil)
	for name, req := range map[string]CreateRequest{
		"no image":      {Policy: "p"},
		"no policy":     {Image: "i"},
		"relative ws":   {Image: "i", Policy: "p", Workspace: Workspace{HostDir: "rel", Mode: WorkspaceBind}},
		"bad mode":      {Image: "i", Policy: "p", Workspace: Workspace{HostDir: "/tmp", Mode: "x"}},
		"bad env":       {Image: "i", Policy: "p", Env: map[string]string{"A=B": "c"}},
		"empty setup":   {Image: "i", Policy: "p", Setup: [][]string{{}}},
		"neg. lifetime": {Image: "i", Policy: "p", Lifetime: -time.Second},
		"cap sys_admin": {Image: "i", Policy: "p", CapAdd: []string{"NET_RAW", "SYS_ADMIN"}},
		"cap empty":     {Image: "i", Policy: "p", CapAdd: []string{""}},
		"cap all":       {Image: "i", Policy: "p", CapAdd: []string{"ALL"}},
	} {
		if _, err := h.r.Create(context.Background(), req); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := h.r.Create(context.Background(), CreateRequest{Image: "missing", Policy: "p"}); !errors.Is(err, ErrNotFound) ||
		!strings.Contains(err.Error(), "make image") {
		t.Errorf("missing image: %v", err)
	}
}

func TestExecTimeoutAndTruncation(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	sb, err := h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p"})
	if err != nil {
		t.Fatal(err)
	}
	h.eng.execFn = func(ctx context.Context, p Process) (ExitStatus, error) {
		p.Stdout.Write(bytes.Repeat([]byte("x"), 100))
		<-ctx.Done()
		return ExitStatus{Code: 137, Killed: true}, nil
	}
	res, err := h.r.Exec(ctx, sb.ID, ExecRequest{Argv: []string{"sleep", "100"}, Timeout: 10 * time.Millisecond, MaxCapture: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || !res.Killed || res.ExitCode != 137 || !res.StdoutTruncated {
		t.Errorf("result %+v", res)
	}
	if want := "xxxxxxxxxx" + TruncationMarker + "[90 bytes omitted]\n"; string(res.Stdout) != want {
		t.Errorf("stdout %q, want %q", res.Stdout, want)
	}
	// Cancelled by the caller: killed, not timed out.
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	res, _ = h.r.Exec(cctx, sb.ID, ExecRequest{Argv: []string{"sleep", "100"}})
	if res.TimedOut || !res.Killed {
		t.Errorf("cancelled exec: %+v", res)
	}
	var stages []string
	for _, e := range h.events {
		if e.Exec != nil && e.ID == res.ID {
			stages = append(stages, e.Exec.Stage)
		}
	}
	if diff := cmp.Diff([]string{"requested", "started", "finished"}, stages); diff != "" {
		t.Errorf("exec events (-want +got):\n%s", diff)
	}
}

// fakeFreezer records the stops and continues Pause and Resume ask for.
type fakeFreezer struct {
	t       *transcript
	stopErr error
}

func (f *fakeFreezer) Stop(pid int) ([]int, error) {
	f.t.add("freezer.Stop init=%d", pid)
	return []int{7, 8}, f.stopErr
}

func (f *fakeFreezer) Cont(pids []int) error {
	f.t.add("freezer.Cont %v", pids)
	return nil
}

// TestPauseCutsAndStops: pause cuts the network in the kernel before it
// stops the processes, refuses commands while paused, and resume undoes
// both in reverse; a pause whose stop fails leaves the sandbox running
// with its network back. Neither the engine nor its cgroup freeze is used.
func TestPauseCutsAndStops(t *testing.T) {
	var tr *transcript
	fz := &fakeFreezer{}
	h := newHarness(t, func(c *Config) {
		c.freezer = fz
		c.BlockNetwork = func(id string, on bool) error { tr.add("hook.Block %s %t", id, on); return nil }
	})
	tr, fz.t = h.t, h.t
	h.eng.pauseErr = fmt.Errorf("cgroup v1: %w", ErrUnsupported)
	sb, err := h.r.Create(context.Background(), CreateRequest{Image: "img", Policy: "p"})
	if err != nil {
		t.Fatal(err)
	}
	mark := len(h.t.lines)
	if err := h.r.Pause(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.r.Get(sb.ID); got.State != audit.StatePaused {
		t.Fatalf("state %s", got.State)
	}
	if _, err := h.r.Exec(context.Background(), sb.ID, ExecRequest{Argv: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "paused") {
		t.Errorf("exec while paused: %v", err)
	}
	if err := h.r.Resume(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	want := "hook.Block 000000000001 true\nfreezer.Stop init=4242\nevent lifecycle sandbox=000000000001 paused 198.18.0.2 state=paused\n" +
		"freezer.Cont [7 8]\nhook.Block 000000000001 false\nevent lifecycle sandbox=000000000001 resumed 198.18.0.2 state=running"
	if got := strings.Join(h.t.lines[mark:], "\n"); got != want {
		t.Errorf("pause and resume:\n%s\nwant:\n%s", got, want)
	}
	fz.stopErr = errors.New("processes kept appearing")
	if err := h.r.Pause(context.Background(), sb.ID); err == nil {
		t.Fatal("a pause whose stop failed succeeded")
	}
	if got, _ := h.r.Get(sb.ID); got.State != audit.StateRunning || !strings.HasSuffix(h.t.String(),
		"hook.Block 000000000001 false\nevent lifecycle sandbox=000000000001 failed 198.18.0.2 state=running\n") {
		t.Errorf("after a failed pause: state %s\n%s", got.State, h.t)
	}
}

func TestReadOnlyCopyInExplained(t *testing.T) {
	h := newHarness(t, nil)
	sb, err := h.r.Create(context.Background(), CreateRequest{Image: "img", Policy: "p", ReadOnlyRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tar.NewWriter(&buf).Close()
	err = h.r.CopyIn(context.Background(), sb.ID, "/etc", &buf)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("CopyIn /etc on a read-only sandbox: %v", err)
	}
	if err := h.r.CopyIn(context.Background(), sb.ID, "/workspace/sub", &buf); err != nil {
		t.Errorf("CopyIn /workspace/sub: %v", err)
	}
}

func TestReconcile(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	sb, err := h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p", Lifetime: time.Hour, CapAdd: []string{"NET_RAW"}})
	if err != nil {
		t.Fatal(err)
	}
	// A crash: a new runner over the same engine, network and state.
	h2 := newHarness(t, func(c *Config) { c.StateDir = h.r.cfg.StateDir })
	h2.eng, h2.net = h.eng, h.net
	h2.r.cfg.Engine, h2.r.net = h.eng, h.net
	h.eng.t, h.net.t = h2.t, h2.t
	// An orphan veth of this instance, one of another instance, and a
	// labelled container that is not running.
	h.net.links["alk-deadbeef00"] = "airlock:test:deadbeef0000"
	h.net.links["alk-otherinst0"] = "airlock:other:otherinst000"
	stopped, _ := h.eng.Create(ctx, Spec{Name: "airlock-stopped", Labels: map[string]string{
		LabelManaged: "true", LabelInstance: "test", LabelSandbox: "stopped00000"}})
	foreign, _ := h.eng.Create(ctx, Spec{Name: "foreign", Labels: map[string]string{LabelManaged: "true", LabelInstance: "other"}})

	rep, err := h2.r.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := ReconcileReport{Adopted: []string{sb.ID}, Removed: []string{"airlock-stopped"}, Veths: []string{"alk-deadbeef00"}}
	if diff := cmp.Diff(want, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if _, ok := h.eng.containers[stopped]; ok {
		t.Error("stopped labelled container not removed")
	}
	if _, ok := h.eng.containers[foreign]; !ok {
		t.Error("another instance's container was removed")
	}
	if _, ok := h.net.links["alk-otherinst0"]; !ok {
		t.Error("another instance's veth was deleted")
	}
	got, err := h2.r.Get(sb.ID)
	if err != nil || !got.Adopted || got.Address != sb.Address || got.Deadline.IsZero() || !slices.Equal(got.CapAdd, []string{"CAP_NET_RAW"}) {
		t.Fatalf("adopted sandbox: %+v, %v", got, err)
	}
	if h2.t.index("hook.Attach ifindex=200 "+sb.ID) < 0 || !strings.Contains(h2.t.String(), "adopted=true") {
		t.Errorf("network path not re-attached:\n%s", h2.t)
	}
	// Adoption pins the same sandbox MAC the veth was created with.
	if mac := "mac=" + PeerMAC(sb.Address).String() + " "; !strings.Contains(h2.t.String(), mac) || !strings.Contains(h.t.String(), mac) {
		t.Errorf("the adopted path does not pin %s:\n%s", mac, h2.t)
	}
	if res, err := h2.r.Exec(ctx, sb.ID, ExecRequest{Argv: []string{"echo", "again"}}); err != nil || string(res.Stdout) != "again\n" {
		t.Errorf("exec after adoption: %+v %v", res, err)
	}
	if _, err := h2.r.Diff(ctx, sb.ID); err != nil {
		t.Errorf("diff after adoption: %v", err)
	}
	if err := h2.r.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}

func TestLifetimeDestroys(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Now = time.Now })
	sb, err := h.r.Create(context.Background(), CreateRequest{Image: "img", Policy: "p", Lifetime: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if _, err := h.r.Get(sb.ID); errors.Is(err, ErrNotFound) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("sandbox not destroyed at the end of its lifetime")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if !strings.Contains(h.t.String(), "event lifecycle sandbox="+sb.ID+" destroyed") {
		t.Errorf("no destroyed event:\n%s", h.t)
	}
}

func TestDiffAgainstBaseline(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("one\n"), 0o644)
	sb, err := h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p", Workspace: Workspace{HostDir: ws, Mode: WorkspaceCopy}})
	if err != nil {
		t.Fatal(err)
	}
	c := h.eng.containers[sb.ContainerID]
	c.files["/workspace/a.txt"] = "two\n"
	c.files["/workspace/b.txt"] = "new\n"
	d, err := h.r.Diff(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []Change{{Path: "a.txt", Kind: "modified", Size: 4}, {Path: "b.txt", Kind: "added", Size: 4}}
	if diff := cmp.Diff(want, d.Changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	if !strings.Contains(d.Patch, "-one\n+two\n") {
		t.Errorf("patch:\n%s", d.Patch)
	}
}

func TestPool(t *testing.T) {
	p, err := newPool(netip.MustParsePrefix("198.18.0.0/30"), netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.alloc()
	if err != nil || a != netip.MustParseAddr("198.18.0.2") {
		t.Fatalf("alloc: %v %v (want .2: .0 network, .1 gateway, .3 broadcast)", a, err)
	}
	if _, err := p.alloc(); err == nil {
		t.Fatal("a /30 has one sandbox address; second alloc succeeded")
	}
	p.release(a)
	if b, _ := p.alloc(); b != a {
		t.Errorf("after release: %v", b)
	}
	if err := p.claim(netip.MustParseAddr("198.18.0.1")); err == nil {
		t.Error("claimed the gateway")
	}
	if _, err := newPool(netip.MustParsePrefix("2001:db8::/64"), netip.Addr{}); err == nil {
		t.Error("IPv6 pool accepted")
	}
}

func TestExecEngineErrorIsAuditedAsFailure(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	sb, err := h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p"})
	if err != nil {
		t.Fatal(err)
	}
	h.eng.execFn = func(context.Context, Process) (ExitStatus, error) { return ExitStatus{}, errors.New("service gone") }
	res, err := h.r.Exec(ctx, sb.ID, ExecRequest{Argv: []string{"true"}})
	if err == nil || res.ExitCode != -1 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	last := h.events[len(h.events)-1]
	if last.Exec == nil || last.Exec.Stage != "finished" || *last.Exec.ExitCode != -1 || !strings.Contains(last.Reason, "service gone") {
		t.Errorf("finished event %+v %+v", last, last.Exec)
	}
	if _, err := h.r.Exec(ctx, sb.ID, ExecRequest{Argv: []string{"ls"}, Cwd: "rel"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("relative cwd: %v", err)
	}
}
