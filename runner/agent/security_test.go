package agent_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"airlock/internal/agentwire"
)

// procsIn lists the host pids in the pid namespace of the sandbox whose
// PID 1 is init, PID 1 and its pre-started idle supervisors excluded (a
// bare "airlock-init-shim", a child of PID 1 with no child of its own; at
// most four: the pool).
func procsIn(t *testing.T, init int) []int {
	all := allProcsIn(t, init)
	parent := map[int]int{}
	for _, p := range all {
		parent[p] = parentOf(p)
	}
	hasChild := map[int]bool{}
	for _, pp := range parent {
		hasChild[pp] = true
	}
	var out []int
	idle := 0
	for _, p := range all {
		cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
		if string(cmd) == "airlock-init-shim\x00" && parent[p] == init && !hasChild[p] && idle < 4 {
			idle++
			continue
		}
		out = append(out, p)
	}
	return out
}

// parentOf reads a process's parent pid from /proc (0 if it is gone).
func parentOf(pid int) int {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if i := strings.LastIndexByte(string(b), ')'); i > 0 {
		if f := strings.Fields(string(b)[i+1:]); len(f) > 1 {
			pp, _ := strconv.Atoi(f[1])
			return pp
		}
	}
	return 0
}

func allProcsIn(t *testing.T, init int) []int {
	t.Helper()
	want, err := os.Readlink("/proc/" + strconv.Itoa(init) + "/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == init {
			continue
		}
		if ns, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && ns == want {
			out = append(out, pid)
		}
	}
	return out
}

// waitNoProcs waits until the sandbox has no process but PID 1.
func waitNoProcs(t *testing.T, init int) {
	t.Helper()
	var left []int
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if left = procsIn(t, init); len(left) == 0 {
			return
		}
	}
	var desc []string
	for _, p := range left {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
		desc = append(desc, strconv.Itoa(p)+":"+strings.ReplaceAll(string(b), "\x00", " "))
	}
	t.Fatalf("processes left in the sandbox: %v", desc)
}

// Invariant 9: a process inside the sandbox that finds the agent's socket
// is refused, whoever it is, and the agent counts (and logs) it.
func TestSandboxProcessesAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name, caps string
		user       string
		mode       string
	}{
		{"root", defaultCaps, "", "connect"},
		{"nobody", defaultCaps, "65534", "connect"},
		{"root after setuid to the overflow uid", defaultCaps, "", "setuid"},
		{"nested user and pid namespace", defaultCaps, "", "userns"},
		{"root with NET_ADMIN and NET_RAW", defaultCaps + ",CAP_NET_ADMIN,CAP_NET_RAW", "", "connect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, pid := sandbox(t, tc.caps)
			c := client(t, pid)
			e, out, errs := run(t, c, agentwire.Request{Argv: []string{"/.airlock/probe", tc.mode}, User: tc.user}, "")
			if e.Code != 0 || !strings.HasPrefix(out, "refused: ") {
				t.Fatalf("probe %s: %+v %q %q", tc.mode, e, out, errs)
			}
			st, err := c.Do(ctx(t), agentwire.Request{Op: agentwire.OpStatus})
			if err != nil || st.Status.Refused < 1 || !strings.HasPrefix(st.Status.LastRefused, "pid ") {
				t.Fatalf("status after a refused peer: %+v %v", st, err)
			}
			want := "refused a peer from inside the sandbox (" + st.Status.LastRefused + ")"
			var logs string
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
				if logs, _ = podman("logs", name); strings.Contains(logs, want) {
					break
				}
			}
			if !strings.Contains(logs, want) {
				t.Errorf("the refusal is not in the sandbox's log: %q", logs)
			}
			t.Logf("probe: %s; agent: refused %d, last %s", strings.TrimSpace(out), st.Status.Refused, st.Status.LastRefused)
		})
	}
}

// A nested network namespace does not even see the name; binding the name
// while PID 1 holds it fails; PID 1's fds cannot be taken (it is not
// dumpable).
func TestSandboxCannotReachSquatOrStealTheSocket(t *testing.T) {
	_, pid := sandbox(t, defaultCaps+",CAP_NET_ADMIN,CAP_NET_RAW")
	c := client(t, pid)
	for mode, want := range map[string]string{"netns": "connection refused", "squat": "address already in use",
		"steal": "pidfd_getfd: operation not permitted"} {
		e, out, errs := run(t, c, agentwire.Request{ID: "p-" + mode, Argv: []string{"/.airlock/probe", mode}}, "")
		if e.Code != 0 || !strings.HasPrefix(out, "refused: ") || !strings.Contains(out, want) {
			t.Errorf("probe %s: %+v %q %q, want refused with %q", mode, e, out, errs, want)
		}
	}
}

// No sandbox process can trace a supervisor — the idle ones a later
// command runs under included — nor read their binary, even as root with
// CAP_SYS_PTRACE: airlock-init-shim is execute-only and owned by an id the
// sandbox does not map (as the runner installs it), so each supervisor is
// non-dumpable from its first instruction, before it could call prctl
// itself.
func TestSupervisorsCannotBeTraced(t *testing.T) {
	for _, caps := range []string{defaultCaps, defaultCaps + ",CAP_SYS_PTRACE"} {
		t.Run(caps, func(t *testing.T) {
			_, pid := sandbox(t, caps)
			c := client(t, pid)
			// A command first, so a supervisor has run one and is reused.
			if e, out, _ := run(t, c, agentwire.Request{ID: "warm", Argv: []string{"true"}}, ""); e.Code != 0 {
				t.Fatalf("true: %+v %q", e, out)
			}
			e, out, errs := run(t, c, agentwire.Request{ID: "trace", Argv: []string{"/.airlock/probe", "trace"}}, "")
			if e.Code != 0 || !strings.HasPrefix(out, "refused: ") || !strings.Contains(out, "operation not permitted") ||
				!strings.Contains(out, "read the binary: open /.airlock/airlock-init-shim: permission denied") {
				t.Fatalf("probe trace: %+v %q %q, want refused", e, out, errs)
			}
			t.Logf("probe: %s", strings.TrimSpace(out))
		})
	}
}

// PID 1 survives every signal a sandbox process can send it, except TERM
// and INT, which end the sandbox as podman stop does (a self-DoS, not an
// escape: notes/agent.md).
func TestPID1SurvivesSignalsFromInside(t *testing.T) {
	_, pid := sandbox(t, defaultCaps)
	c := client(t, pid)
	e, _, errs := run(t, c, agentwire.Request{ID: "sig", Shell: "for s in HUP QUIT USR1 USR2 SEGV PIPE ABRT ALRM WINCH CHLD KILL STOP; do kill -$s 1 || exit 1; done; sleep 0.2"}, "")
	if e.Code != 0 {
		t.Fatalf("kill loop: %+v %s", e, errs)
	}
	e, out, _ := run(t, c, agentwire.Request{ID: "after", Argv: []string{"echo", "alive"}}, "")
	if e.Code != 0 || out != "alive\n" {
		t.Fatalf("after the signals: %+v %q", e, out)
	}
	if c.Pid() != pid {
		t.Fatal("another PID 1")
	}
}
