package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"airlock/audit"
	"airlock/bpf"
	"airlock/client"
)

// fakeKernel is the kernel path's switch and blocks, as the pinned map
// would keep them.
type fakeKernel struct {
	mu     sync.Mutex
	all    bool
	blocks map[uint32]bpf.Block
	fail   error
}

func newFakeKernel() *fakeKernel { return &fakeKernel{blocks: map[uint32]bpf.Block{}} }

func (k *fakeKernel) SetLockdown(on bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return k.fail
	}
	k.all = on
	return nil
}

func (k *fakeKernel) Lockdown() (bool, error) { k.mu.Lock(); defer k.mu.Unlock(); return k.all, nil }

func (k *fakeKernel) BlockSandbox(num uint32, b bpf.Block, on bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if on {
		k.blocks[num] |= b
	} else {
		k.blocks[num] &^= b
	}
	return nil
}

func (k *fakeKernel) SandboxBlock(num uint32) (bpf.Block, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.blocks[num], nil
}

type eventLog struct {
	mu sync.Mutex
	ev []audit.Event
}

func (l *eventLog) Emit(e audit.Event) { l.mu.Lock(); l.ev = append(l.ev, e); l.mu.Unlock() }

func (l *eventLog) lockdowns() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.ev {
		if e.Kind == audit.KindLockdown {
			out = append(out, fmt.Sprintf("%s %s %s by %s: %s", e.Lockdown.Action, e.Lockdown.Scope, e.Sandbox, e.Lockdown.By, e.Reason))
		}
	}
	return out
}

var liveNums = map[string]uint32{"sb-1": 5, "sb-2": 6}

func newTestLockdown(dir string, k *fakeKernel, em audit.Emitter) *lockdown {
	return &lockdown{file: filepath.Join(dir, lockdownFile), kernel: k, em: em,
		num: func(id string) (uint32, bool) { n, ok := liveNums[id]; return n, ok }}
}

// ldBackend is the API's fake backend with a real kill switch on a fake
// kernel.
type ldBackend struct {
	*fakeBackend
	l *lockdown
}

func (b *ldBackend) LockdownState(context.Context) (client.LockdownState, error) {
	return b.l.state(), nil
}

func (b *ldBackend) SetLockdown(_ context.Context, req client.LockdownRequest, by string) (client.LockdownState, error) {
	return b.l.set(req, by)
}

func TestLockdownThroughTheAPI(t *testing.T) {
	dir := t.TempDir()
	k, ev := newFakeKernel(), &eventLog{}
	l := newTestLockdown(dir, k, ev)
	must(t, l.restore(nil))
	c, _ := startAPI(t, &ldBackend{fakeBackend: newFake(), l: l}, "")
	ctx := context.Background()

	_, err := c.SetLockdown(ctx, client.LockdownRequest{Reason: "  "})
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Code != client.CodeInvalid || !strings.Contains(ae.Message, "reason: required") {
		t.Fatalf("lockdown without a reason: %v, want invalid", err)
	}
	if k.all {
		t.Fatal("a refused request engaged the switch")
	}
	st, err := c.SetLockdown(ctx, client.LockdownRequest{Reason: "incident 42"})
	if err != nil || st.All == nil || st.All.Reason != "incident 42" || !k.all {
		t.Fatalf("engage: %+v, %v (kernel %v)", st, err, k.all)
	}
	who := fmt.Sprintf("(uid %d)", os.Getuid())
	if !strings.Contains(st.All.By, who) {
		t.Errorf("engaged by %q, want the caller %s", st.All.By, who)
	}
	if _, err := c.SetLockdown(ctx, client.LockdownRequest{Reason: "again"}); !errors.As(err, &ae) || ae.Code != client.CodeConflict {
		t.Errorf("second engage: %v, want conflict", err)
	}
	if _, err := c.SetLockdown(ctx, client.LockdownRequest{Sandbox: "sb-1", Reason: "exfil from sb-1"}); err != nil || k.blocks[5] != bpf.BlockLockdown {
		t.Fatalf("block sb-1: %v (blocks %v)", err, k.blocks)
	}
	if _, err := c.SetLockdown(ctx, client.LockdownRequest{Sandbox: "sb-9", Reason: "x"}); !errors.As(err, &ae) || ae.Code != client.CodeNotFound {
		t.Errorf("block of an unknown sandbox: %v, want not found", err)
	}
	got, err := c.Lockdown(ctx)
	if err != nil || got.All == nil || len(got.Sandboxes) != 1 || got.Sandboxes[0].Sandbox != "sb-1" {
		t.Fatalf("GET /v1/lockdown = %+v, %v", got, err)
	}
	if _, err := c.SetLockdown(ctx, client.LockdownRequest{Lift: true, Reason: "contained"}); err != nil || k.all {
		t.Fatalf("lift: %v (kernel %v)", err, k.all)
	}
	if k.blocks[5] != bpf.BlockLockdown {
		t.Error("lifting the global switch lifted sb-1's own block")
	}
	if _, err := c.SetLockdown(ctx, client.LockdownRequest{Lift: true, Sandbox: "sb-1", Reason: "sb-1 cleaned"}); err != nil || k.blocks[5] != 0 {
		t.Fatalf("lift sb-1: %v (blocks %v)", err, k.blocks)
	}
	evs := ev.lockdowns()
	want := []string{
		"engaged all  by " + st.All.By + ": incident 42",
		"engaged sandbox sb-1 by " + st.All.By + ": exfil from sb-1",
		"lifted all  by " + st.All.By + ": contained",
		"lifted sandbox sb-1 by " + st.All.By + ": sb-1 cleaned",
	}
	if strings.Join(evs, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(evs, "\n"), strings.Join(want, "\n"))
	}
}

// TestLockdownByOverTCP: a caller over the TCP listener is recorded as
// everywhere else, token@ADDR (its address), in the state and the event.
func TestLockdownByOverTCP(t *testing.T) {
	k, ev := newFakeKernel(), &eventLog{}
	l := newTestLockdown(t.TempDir(), k, ev)
	must(t, l.restore(nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const token = "0123456789abcdef-lockdown"
	srv := NewHTTPServer((&API{Backend: &ldBackend{fakeBackend: newFake(), l: l}, Token: token}).Handler())
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c := client.NewTCP("http://"+ln.Addr().String(), token)
	st, err := c.SetLockdown(context.Background(), client.LockdownRequest{Reason: "from afar"})
	if err != nil || st.All == nil {
		t.Fatalf("engage over TCP: %+v, %v", st, err)
	}
	if !strings.HasPrefix(st.All.By, "token@127.0.0.1:") {
		t.Fatalf("engaged by %q, want token@127.0.0.1:PORT", st.All.By)
	}
	if evs := ev.lockdowns(); len(evs) != 1 || !strings.Contains(evs[0], "by "+st.All.By+":") {
		t.Fatalf("events %v, want one by %s", evs, st.All.By)
	}
}

// A restarted serve re-applies what the state dir recorded, and keeps a
// switch it finds on in the kernel with no record (fail closed).
func TestLockdownSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	k, ev := newFakeKernel(), &eventLog{}
	l := newTestLockdown(dir, k, ev)
	must(t, l.restore(nil))
	if _, err := l.set(client.LockdownRequest{Reason: "incident 7"}, "root (uid 0)"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.set(client.LockdownRequest{Sandbox: "sb-2", Reason: "suspect"}, "token"); err != nil {
		t.Fatal(err)
	}

	k2, ev2 := newFakeKernel(), &eventLog{} // even a kernel that lost its flags
	l2 := newTestLockdown(dir, k2, ev2)
	must(t, l2.restore([]string{"sb-1", "sb-2"}))
	if !k2.all || k2.blocks[6] != bpf.BlockLockdown || k2.blocks[5] != 0 {
		t.Fatalf("after restart: all %v blocks %v", k2.all, k2.blocks)
	}
	st := l2.state()
	if st.All == nil || st.All.By != "root (uid 0)" || st.All.Reason != "incident 7" || len(st.Sandboxes) != 1 || st.Sandboxes[0].By != "token" {
		t.Errorf("state after restart: %+v", st)
	}
	want := "restored all  by airlock serve: incident 7\nrestored sandbox sb-2 by airlock serve: suspect"
	if got := strings.Join(ev2.lockdowns(), "\n"); got != want {
		t.Errorf("restart events:\n%s\nwant:\n%s", got, want)
	}

	// No record, but the pinned map says on: it stays on.
	k3 := newFakeKernel()
	k3.all = true
	k3.blocks[5] = bpf.BlockLockdown | bpf.BlockPause
	l3 := newTestLockdown(t.TempDir(), k3, &eventLog{})
	must(t, l3.restore([]string{"sb-1"}))
	if st := l3.state(); !k3.all || st.All == nil || !strings.Contains(st.All.Reason, "found engaged") || len(st.Sandboxes) != 1 {
		t.Errorf("a switch found on in the kernel: %+v (kernel %v)", st, k3.all)
	}

	// A corrupt record is an error naming the file, and touches nothing.
	bad := t.TempDir()
	must(t, os.WriteFile(filepath.Join(bad, lockdownFile), []byte("{not json"), 0o600))
	k4 := newFakeKernel()
	k4.all = true
	if err := newTestLockdown(bad, k4, &eventLog{}).restore(nil); err == nil || !strings.Contains(err.Error(), lockdownFile) || !k4.all {
		t.Errorf("corrupt state: %v (kernel %v)", err, k4.all)
	}
}

// Lifting records first: when the record cannot be written, the switch
// stays engaged in the kernel.
func TestLockdownLiftFailsClosed(t *testing.T) {
	dir := t.TempDir()
	k := newFakeKernel()
	l := newTestLockdown(dir, k, &eventLog{})
	must(t, l.restore(nil))
	if _, err := l.set(client.LockdownRequest{Reason: "x"}, "token"); err != nil {
		t.Fatal(err)
	}
	l.file = filepath.Join(dir, "missing", lockdownFile)
	if _, err := l.set(client.LockdownRequest{Lift: true, Reason: "y"}, "token"); err == nil || !k.all || l.state().All == nil {
		t.Errorf("lift with an unwritable record: %v; kernel %v", err, k.all)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
