//go:build remote

package serve_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/audit"
	"airlock/client"
	"airlock/runner"
)

// lockedBuffer is a terminal's screen the test reads while it is written.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestShellRecord runs an appliance with the in-sandbox agent (a shell
// session is a terminal through it) for shellInLab.
func TestShellRecord(t *testing.T) {
	l := newLab(t, busyboxImage)
	l.writeFiles()
	l.spec.agent = buildAgent(t, l.dir)
	l.startServe()
	shellInLab(t, l)
}

// shellInLab: a recorded shell session through the real agent. What was
// typed and what was shown are in its record (the artifact
// shells/EXEC_ID.jsonl once the sandbox ends), a task secret's value typed
// and echoed is not; the exec records name the record, the report links it.
func shellInLab(t *testing.T, l *lab) {
	const secret = "tok-5ecret-9931"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := l.c.Create(ctx, client.CreateRequest{Image: busyboxImage, Secrets: map[string]string{"TOKEN": secret}})
	if err != nil {
		t.Fatalf("create sandbox: %v\n%s", err, l.tail(20))
	}
	defer l.c.Delete(context.Background(), sb.ID)
	if got, err := l.c.Get(ctx, sb.ID); err != nil || got.Deadline.IsZero() || got.Owner != "local" {
		t.Errorf("the sandbox shows no deadline (sandbox.lifetime) or owner: %+v, %v", got, err)
	}
	inR, inW := io.Pipe()
	screen := &lockedBuffer{}
	done := make(chan struct{})
	var res client.ExecResult
	go func() {
		defer close(done)
		res, err = l.c.Shell(ctx, sb.ID, client.ExecRequest{Rows: 24, Cols: 80}, inR, screen, nil)
	}()
	typeLine := func(s, want string) {
		io.WriteString(inW, s+"\n")
		waitFor(t, 20*time.Second, "the shell to show "+want, func() bool { return strings.Contains(screen.String(), want) || done2(done) })
		if !strings.Contains(screen.String(), want) {
			t.Fatalf("the shell did not show %q: screen %q, %+v, %v", want, screen.String(), res, err)
		}
	}
	typeLine("echo typed-$((6*7))", "typed-42")
	typeLine("echo "+secret+" done", "done\r\n")
	io.WriteString(inW, "exit 3\n")
	<-done
	inW.Close()
	if err != nil || res.ExitCode != 3 {
		t.Fatalf("shell: %+v, %v; screen %q", res, err, screen.String())
	}
	if err := l.c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	name := "shells/" + res.ID + ".jsonl"
	var rec bytes.Buffer
	if err := l.c.Artifact(ctx, sb.ID, name, &rec); err != nil {
		t.Fatalf("artifact %s: %v", name, err)
	}
	if strings.Contains(rec.String(), secret) {
		t.Errorf("the shell record holds the secret's value:\n%s", rec.String())
	}
	lines, err := runner.ReadShellRecord(&rec)
	if err != nil {
		t.Fatal(err)
	}
	var typed, shown strings.Builder
	for _, ln := range lines {
		typed.WriteString(ln.In)
		shown.WriteString(ln.Out)
	}
	for what, want := range map[string]string{
		"typed: the command": typed.String() + "|echo typed-$((6*7))", "shown: its output": shown.String() + "|typed-42",
		"typed: the secret redacted": typed.String() + "|echo [REDACTED] done", "shown: the secret redacted": shown.String() + "|[REDACTED] done",
	} {
		got, w, _ := strings.Cut(want, "|")
		if !strings.Contains(got, w) {
			t.Errorf("%s: record lacks %q: %q", what, w, got)
		}
	}
	if first, last := lines[0], lines[len(lines)-1]; first.Start == nil || last.End == nil || last.End.ExitCode != 3 || last.End.Redactions == 0 {
		t.Errorf("record start %+v end %+v", first.Start, last.End)
	}
	recorded := false
	for _, e := range l.events(sb.ID) {
		if e.Kind == audit.KindExec && e.ID == res.ID && e.Exec.Stage == "finished" && e.Exec.Record == name {
			recorded = true
		}
	}
	if !recorded {
		t.Errorf("no finished exec event of %s names the record %s", res.ID, name)
	}
	var rep bytes.Buffer
	if err := l.c.Artifact(ctx, sb.ID, "report.md", &rep); err != nil || !strings.Contains(rep.String(), "]("+name+")") {
		t.Errorf("report.md does not link %s (%v):\n%s", name, err, rep.String())
	}
}

func done2(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
