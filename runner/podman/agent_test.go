package podman_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"airlock/audit"
	"airlock/internal/agentwire"
	"airlock/runner"
)

// finished returns the finished exec event of id, waiting for it.
func (e *env) finished(t *testing.T, id string) audit.Event {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		e.mu.Lock()
		for _, ev := range e.events {
			if ev.Exec != nil && ev.ID == id && ev.Exec.Stage == "finished" {
				e.mu.Unlock()
				return ev
			}
		}
		e.mu.Unlock()
	}
	t.Fatalf("no finished event for exec %s", id)
	return audit.Event{}
}

// The exec record through the agent: who, where, pid, exit, rusage, byte
// counts, bounded heads and tails with the known secret values redacted
// and counted.
func TestAgentExecRecord(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-t0ken-value"
	e := newEnv(t, func(c *runner.Config) {
		c.SecretValues = func(string) []string { return []string{secret, "ab"} } // "ab": too short to redact
	})
	ctx := context.Background()
	sb, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Agent != runner.AgentName {
		t.Fatalf("sandbox runs commands through %q (%s), want the agent", sb.Agent, sb.AgentError)
	}
	res, err := e.r.Exec(ctx, sb.ID, runner.ExecRequest{User: "65534", Cwd: "/tmp",
		Shell: "echo start " + secret + "; head -c 100000 /dev/zero | tr '\\0' x; echo; echo end " + secret + "; echo oops >&2; exit 4"})
	if err != nil || res.ExitCode != 4 || res.Agent != runner.AgentName || res.Pid <= 1 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	ev := e.finished(t, res.ID)
	x := ev.Exec
	if x.Agent != runner.AgentName || x.User != "65534" || x.Cwd != "/tmp" || x.Pid != res.Pid || *x.ExitCode != 4 {
		t.Errorf("record: %+v", x)
	}
	if x.StdoutBytes != int64(len("start "+secret+"\n")+100000+1+len("end "+secret+"\n")) || x.StderrBytes != 5 {
		t.Errorf("byte counts: %d %d", x.StdoutBytes, x.StderrBytes)
	}
	if !strings.HasPrefix(x.StdoutHead, "start [REDACTED]\nxxx") || !strings.HasSuffix(x.StdoutTail, "xxx\nend [REDACTED]\n") ||
		len(x.StdoutHead) > runner.EventOutputMax || len(x.StdoutTail) > runner.EventOutputMax || x.StderrHead != "oops\n" {
		t.Errorf("head/tail: %q ... %q / %q", x.StdoutHead[:40], x.StdoutTail[len(x.StdoutTail)-40:], x.StderrHead)
	}
	if x.Redactions != 4 { // twice in argv (the shell line), twice in the output
		t.Errorf("redactions %d, want 4", x.Redactions)
	}
	if strings.Contains(fmt.Sprint(x.Argv), secret) {
		t.Errorf("secret in the recorded argv: %q", x.Argv)
	}
	if x.MaxRSSKB <= 0 {
		t.Errorf("no rusage: %+v", x)
	}
	var stages []string
	e.mu.Lock()
	for _, ev := range e.events {
		if ev.Exec != nil && ev.ID == res.ID {
			stages = append(stages, ev.Exec.Stage)
		}
	}
	e.mu.Unlock()
	if strings.Join(stages, ",") != "requested,started,finished" {
		t.Errorf("stages %v", stages)
	}
	// The files API through the same agent.
	if _, err := e.r.WriteFile(ctx, sb.ID, "/tmp/f.txt", 0o640, 5, strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if fi, err := e.r.ReadFile(ctx, sb.ID, "/tmp/f.txt", &got); err != nil || got.String() != "hello" || fi.Mode != 0o640 {
		t.Fatalf("read back: %q %+v %v", got.String(), fi, err)
	}
	if _, err := e.r.ReadFile(ctx, sb.ID, "/proc/1/environ", &got); !errors.Is(err, runner.ErrInvalid) {
		t.Fatalf("read of /proc: %v", err)
	}
}

// Without the agent, commands go through podman exec and the sandbox says
// so; what needs the agent says it does.
func TestAgentFallbackToPodmanExec(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *runner.Config) { c.NoAgent = true })
	ctx := context.Background()
	sb, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Agent != runner.PodmanExecName || sb.AgentError == "" {
		t.Fatalf("agent %q (%s)", sb.Agent, sb.AgentError)
	}
	if got := e.mustExec(t, sb.ID, "echo", "hi"); got != "hi\n" {
		t.Fatalf("echo: %q", got)
	}
	if _, err := e.r.Exec(ctx, sb.ID, runner.ExecRequest{Argv: []string{"sh"}, TTY: true}); !errors.Is(err, runner.ErrUnsupported) {
		t.Fatalf("tty without the agent: %v", err)
	}
	if _, err := e.r.ReadFile(ctx, sb.ID, "/etc/hostname", &bytes.Buffer{}); !errors.Is(err, runner.ErrUnsupported) {
		t.Fatalf("files without the agent: %v", err)
	}
}

// helperEnv names the variables of the crash helper (TestCrashHelper).
const helperEnv = "AIRLOCK_TEST_CRASH_HELPER"

// TestCrashHelper is the appliance that dies: run by TestCommandSurvivesAppliancekill
// in a child process, it creates a sandbox, starts a background command and
// a short one, prints the ids and waits to be killed with SIGKILL.
func TestCrashHelper(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("run by TestCommandSurvivesApplianceKill")
	}
	cfg := runner.Config{Engine: engine, Emitter: audit.EmitterFunc(func(audit.Event) {}),
		Instance: os.Getenv(helperEnv + "_INSTANCE"), StateDir: os.Getenv(helperEnv + "_STATE"), AgentBinary: agentBin}
	r, err := runner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	long, err := r.Exec(ctx, sb.ID, runner.ExecRequest{Background: true, Shell: "echo long-running; sleep 1000"})
	if err != nil {
		t.Fatal(err)
	}
	short, err := r.Exec(ctx, sb.ID, runner.ExecRequest{Background: true, Shell: "sleep 1; echo short-done; exit 7"})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("IDS %s %s %s\n", sb.ID, long.ID, short.ID)
	time.Sleep(time.Hour)
}

// An appliance killed with SIGKILL while commands run: they keep running;
// after the restart (a new runner adopting the sandbox) they are listed,
// re-attached and killed, and the finished record of each is written —
// also of the one that ended while no appliance ran.
func TestCommandSurvivesApplianceKill(t *testing.T) {
	e := newEnv(t, func(c *runner.Config) { c.AttachNetwork = nil })
	e.r.Close()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCrashHelper$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"=1", helperEnv+"_INSTANCE="+e.instance, helperEnv+"_STATE="+e.stateDir,
		helperEnv+"_SOCKET="+serviceSocket)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var sbID, longID, shortID string
	buf := make([]byte, 4096)
	var seen string
	for end := time.Now().Add(2 * time.Minute); sbID == "" && time.Now().Before(end); {
		n, err := out.Read(buf)
		seen += string(buf[:n])
		if i := strings.Index(seen, "IDS "); i >= 0 && strings.Contains(seen[i:], "\n") {
			fmt.Sscanf(seen[i:], "IDS %s %s %s", &sbID, &longID, &shortID)
		}
		if err != nil {
			break
		}
	}
	if sbID == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper gave no ids: %q", seen)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	time.Sleep(1500 * time.Millisecond) // the short command ends while no appliance runs

	r2, err := runner.New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.r = r2
	ctx := context.Background()
	rep, err := r2.Reconcile(ctx)
	if err != nil || len(rep.Adopted) != 1 {
		t.Fatalf("reconcile: %+v %v", rep, err)
	}
	short := e.finished(t, shortID)
	if !short.Exec.Recovered || *short.Exec.ExitCode != 7 || short.Exec.StdoutHead != "short-done\n" {
		t.Errorf("recovered record of the short command: %+v", short.Exec)
	}
	ps, err := r2.Processes(ctx, sbID)
	if err != nil {
		t.Fatal(err)
	}
	var running bool
	for _, p := range ps {
		if p.ID == longID && p.Running {
			running = true
		}
	}
	if !running {
		t.Fatalf("the long command is not listed as running after the restart: %+v", ps)
	}
	var attached bytes.Buffer
	actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	res, err := r2.Attach(actx, sbID, longID, runner.ExecRequest{Stdout: &attached})
	cancel()
	if err != nil || !res.Running || attached.String() != "long-running\n" {
		t.Fatalf("re-attach: %+v %v %q", res, err, attached.String())
	}
	if err := r2.Kill(ctx, sbID, longID); err != nil {
		t.Fatal(err)
	}
	long := e.finished(t, longID)
	if !long.Exec.Recovered || !long.Exec.Killed || long.Exec.StdoutHead != "long-running\n" {
		t.Errorf("record of the killed command: %+v", long.Exec)
	}
	if err := r2.Signal(ctx, sbID, longID, "TERM"); err == nil {
		t.Error("signal to a killed command succeeded")
	}
	_ = agentwire.Version
}

// TestExecNamesTheLimit: a command ended by a limit says which, in its
// result and its finished record: a write past the file size limit
// (SIGXFSZ) is fsize, a command past its timeout is timeout, and one that
// exits by itself names none.
func TestExecNamesTheLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	sb, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev", Limits: runner.Limits{FileSizeBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Agent != runner.AgentName {
		t.Fatalf("sandbox runs commands through %q (%s), want the agent", sb.Agent, sb.AgentError)
	}
	for _, c := range []struct {
		req   runner.ExecRequest
		limit string
	}{
		{runner.ExecRequest{Argv: []string{"dd", "if=/dev/zero", "of=/tmp/big", "bs=1048576", "count=2"}}, runner.LimitFsize},
		{runner.ExecRequest{Argv: []string{"sleep", "30"}, Timeout: 300 * time.Millisecond}, runner.LimitTimeout},
		{runner.ExecRequest{Argv: []string{"sh", "-c", "exit 3"}}, ""},
	} {
		res, err := e.r.Exec(ctx, sb.ID, c.req)
		if err != nil {
			t.Fatalf("%v: %v", c.req.Argv, err)
		}
		if res.Limit != c.limit {
			t.Errorf("%v: limit %q (signal %q, exit %d, timed out %v), want %q", c.req.Argv, res.Limit, res.Signal, res.ExitCode, res.TimedOut, c.limit)
		}
		if x := e.finished(t, res.ID).Exec; x.Limit != c.limit {
			t.Errorf("%v: the record's limit %q, want %q", c.req.Argv, x.Limit, c.limit)
		}
	}
}
