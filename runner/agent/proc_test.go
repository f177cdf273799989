package agent_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/internal/agentwire"
	"airlock/runner/agent"
)

// A timeout ends the command and everything it spawned: a setsid
// grandchild, a TERM-ignoring subshell, a plain child.
func TestTimeoutKillsTheWholeTree(t *testing.T) {
	_, pid := sandbox(t, defaultCaps)
	c := client(t, pid)
	start := time.Now()
	e, _, errs := run(t, c, agentwire.Request{ID: "tree", TimeoutMS: 300, GraceMS: 200,
		Shell: "(setsid sleep 1000 &); (trap '' TERM; sleep 1000) & sleep 1000 & trap '' TERM; sleep 1000"}, "")
	if !e.TimedOut || e.Killed || e.Reaped < 4 || time.Since(start) > 5*time.Second {
		t.Fatalf("timeout: %+v %s (after %v)", e, errs, time.Since(start))
	}
	waitNoProcs(t, pid)
}

// A fork bomb under a pids rlimit (a non-root user: the limit counts that
// uid's processes) is ended with all its processes.
func TestKillEndsAForkBomb(t *testing.T) {
	_, pid := sandbox(t, defaultCaps)
	c := client(t, pid)
	e, _, _ := run(t, c, agentwire.Request{ID: "bomb", User: "1000:1000", TimeoutMS: 1500, GraceMS: 100,
		Shell: "ulimit -u 200; b() { b & b & sleep 1000; }; b & exec sleep 1000"}, "") // every instance stays, up to the limit
	if !e.TimedOut || e.Reaped < 50 {
		t.Fatalf("fork bomb: %+v", e)
	}
	t.Logf("fork bomb: killed %d processes", e.Reaped)
	waitNoProcs(t, pid)
}

// 1000 timed-out commands leave no process behind.
func TestThousandTimeoutsLeaveNothing(t *testing.T) {
	_, pid := sandbox(t, defaultCaps)
	c := client(t, pid)
	var wg sync.WaitGroup
	errs := make(chan string, 1000)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 1000; i += 8 {
				e, err := c.Exec(ctx(t), agentwire.Request{ID: fmt.Sprintf("to-%d", i), TimeoutMS: 20, GraceMS: 20,
					Shell: "setsid sleep 100 & trap '' TERM; sleep 100"}, agent.Streams{}, nil)
				if err != nil || !e.TimedOut {
					errs <- fmt.Sprintf("%d: %+v %v", i, e, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	waitNoProcs(t, pid)
	st, err := c.Do(ctx(t), agentwire.Request{Op: agentwire.OpStatus})
	if err != nil || st.Status.Running != 0 {
		t.Fatalf("status: %+v %v", st, err)
	}
}

// Sequential commands reuse the pre-started supervisors instead of
// starting a new one per command (each is a Go process: its start-up was a
// third of the sandbox's CPU in a loop of short commands), and a reused
// supervisor still ends a command's whole tree, setsid grandchild and
// TERM-ignoring shell included.
func TestSequentialCommandsReuseSupervisors(t *testing.T) {
	_, pid := sandbox(t, defaultCaps)
	c := client(t, pid)
	seen := map[int]bool{}
	const n = 100
	for i := range n {
		e, _, errs := run(t, c, agentwire.Request{ID: fmt.Sprintf("seq-%d", i), Argv: []string{"true"}}, "")
		if e.Code != 0 {
			t.Fatalf("true: %+v %s", e, errs)
		}
		for _, p := range shimsOf(t, pid) {
			seen[p] = true
		}
	}
	// Before: one new supervisor per command (n plus the pool).
	if len(seen) >= n/2 {
		t.Fatalf("%d sequential commands went through %d supervisors", n, len(seen))
	}
	t.Logf("%d sequential commands went through %d supervisors", n, len(seen))
	e, _, errs := run(t, c, agentwire.Request{ID: "seq-tree", TimeoutMS: 300, GraceMS: 200,
		Shell: "(setsid sleep 1000 &); trap '' TERM; sleep 1000"}, "")
	if !e.TimedOut || e.Reaped < 2 {
		t.Fatalf("timeout on a reused supervisor: %+v %s", e, errs)
	}
	waitNoProcs(t, pid)
}

// shimsOf lists the supervisors among init's children (host pids).
func shimsOf(t *testing.T, init int) []int {
	var out []int
	for _, p := range allProcsIn(t, init) {
		if parentOf(p) != init {
			continue
		}
		if cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline"); string(cmd) == "airlock-init-shim\x00" {
			out = append(out, p)
		}
	}
	return out
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// rssKB is a process's resident set.
func rssKB(t *testing.T, pid int) int {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	t.Fatalf("no VmRSS for %d", pid)
	return 0
}

// 1 GiB to stdout streams through with the agent's memory bounded, and
// binary output that is not UTF-8 arrives byte for byte.
func TestOutputFloodAndBinary(t *testing.T) {
	_, pid := sandbox(t, defaultCaps)
	c := client(t, pid)
	var cnt counter
	e, err := c.Exec(ctx(t), agentwire.Request{ID: "flood", Shell: "head -c 1073741824 /dev/zero"}, agent.Streams{Stdout: &cnt}, nil)
	if err != nil || e.Code != 0 || cnt.n != 1<<30 || e.Stdout != 1<<30 {
		t.Fatalf("flood: %+v %v, got %d bytes", e, err, cnt.n)
	}
	if rss := rssKB(t, pid); rss > 64<<10 {
		t.Fatalf("agent RSS %d KiB after a 1 GiB flood", rss)
	}
	e, out, _ := run(t, c, agentwire.Request{ID: "bin", Shell: "head -c 300000 /dev/urandom > /tmp/b; printf '\\377\\376\\300\\000'; cat /tmp/b"}, "")
	var sum bytes.Buffer
	if _, err := c.ReadFile(ctx(t), "/tmp/b", 0, &sum); err != nil || e.Code != 0 {
		t.Fatal(err, e)
	}
	want := append([]byte{0xff, 0xfe, 0xc0, 0x00}, sum.Bytes()...)
	if sha256.Sum256([]byte(out)) != sha256.Sum256(want) {
		t.Fatalf("binary output changed: %d bytes, want %d", len(out), len(want))
	}
}

// Output the command wrote before it exited is all delivered, even when a
// background child keeps the pipe open (so the agent stops waiting for EOF
// after a short drain) and the host was not reading when that drain time
// ended (so the agent's reader was held up with output still in the pipe).
func TestOutputKeptWhenHostReadsLate(t *testing.T) {
	_, pid := sandbox(t, defaultCaps)
	c := client(t, pid)
	// Which sizes leave output in the pipe when the drain time ends
	// depends on the socket's and the pipe's buffers: try a range, each
	// small enough that the command can end while the host is not reading.
	for size := int64(64 << 10); size <= 384<<10; size += 16 << 10 {
		late := &lateCounter{done: fmt.Sprintf("/proc/%d/root/tmp/late-%d", pid, size)}
		e, err := c.Exec(ctx(t), agentwire.Request{ID: fmt.Sprintf("late-%d", size),
			Shell: fmt.Sprintf("(sleep 100 &); head -c %d /dev/zero; touch /tmp/late-%d", size, size)},
			agent.Streams{Stdout: late}, nil)
		if err != nil || e.Code != 0 || late.n != size || e.Stdout != size {
			t.Errorf("%d bytes written: %+v %v, got %d", size, e, err, late.n)
		}
	}
}

// lateCounter counts bytes; on the first write it waits until the
// command (head) has exited (or a second: a size the buffers cannot hold
// keeps it from ending), then a while longer: a host that was not reading
// its output when the command ended.
type lateCounter struct {
	done string // the command has ended once this file exists
	n    int64
}

func (c *lateCounter) Write(p []byte) (int, error) {
	if c.n == 0 {
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(c.done); err == nil {
				break
			}
		}
		time.Sleep(300 * time.Millisecond) // longer than the agent's drain time
	}
	c.n += int64(len(p))
	return len(p), nil
}

// A background command outlives its call; it can be listed, re-attached
// (its kept output first), signalled and killed.
func TestBackgroundAttachSignalKill(t *testing.T) {
	_, pid := sandbox(t, defaultCaps)
	c := client(t, pid)
	var st agentwire.Started
	if _, err := c.Exec(ctx(t), agentwire.Request{ID: "bg", Background: true,
		Shell: "trap 'echo got-usr1' USR1; echo first; while :; do sleep 0.05; done"}, agent.Streams{},
		func(s agentwire.Started) { st = s }); err != nil || st.Pid <= 1 {
		t.Fatalf("background: %v %+v", err, st)
	}
	ps, err := c.Do(ctx(t), agentwire.Request{Op: agentwire.OpPs})
	if err != nil || len(ps.Procs) != 1 || !ps.Procs[0].Running || ps.Procs[0].ID != "bg" {
		t.Fatalf("ps: %+v %v", ps, err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := c.Do(ctx(t), agentwire.Request{Op: agentwire.OpSignal, ID: "bg", Signal: "USR1"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	var out syncBuf
	done := make(chan *agentwire.Exit)
	go func() {
		e, err := c.Attach(ctx(t), "bg", agent.Streams{Stdout: &out}, nil)
		if err != nil {
			t.Error(err)
		}
		done <- e
	}()
	time.Sleep(200 * time.Millisecond)
	if _, err := c.Do(ctx(t), agentwire.Request{Op: agentwire.OpKill, ID: "bg"}); err != nil {
		t.Fatal(err)
	}
	e := <-done
	if e == nil || !e.Killed || !strings.Contains(out.String(), "first\ngot-usr1\n") {
		t.Fatalf("attach: %+v %q", e, out.String())
	}
	if _, err := c.Do(ctx(t), agentwire.Request{Op: agentwire.OpSignal, ID: "bg", Signal: "TERM"}); !agent.IsRemote(err, agentwire.CodeNotFound) {
		t.Fatalf("signal to an ended command: %v", err)
	}
	if _, err := c.Do(ctx(t), agentwire.Request{Op: agentwire.OpForget, ID: "bg"}); err != nil {
		t.Fatal(err)
	}
	waitNoProcs(t, pid)
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A PTY session gets a terminal of the asked size, follows a resize, and
// its exit code comes back.
func TestPTYWithResize(t *testing.T) {
	_, pid := sandbox(t, defaultCaps)
	c := client(t, pid)
	inR, inW := io.Pipe()
	resize := make(chan agentwire.Resize)
	var out syncBuf
	done := make(chan *agentwire.Exit)
	go func() {
		e, err := c.Exec(ctx(t), agentwire.Request{ID: "tty", TTY: true, Rows: 40, Cols: 120,
			Shell: "tty; stty size; read x; stty size; exit 3"}, agent.Streams{Stdin: inR, Stdout: &out, Resize: resize}, nil)
		if err != nil {
			t.Error(err)
		}
		done <- e
	}()
	for end := time.Now().Add(5 * time.Second); !strings.Contains(out.String(), "40 120") && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	resize <- agentwire.Resize{Rows: 50, Cols: 100}
	time.Sleep(100 * time.Millisecond)
	io.WriteString(inW, "go\n")
	e := <-done
	inW.Close()
	close(resize)
	s := out.String()
	if e == nil || e.Code != 3 || !strings.Contains(s, "/dev/pts/") || !strings.Contains(s, "40 120") || !strings.Contains(s, "50 100") {
		t.Fatalf("pty: %+v %q", e, s)
	}
}
