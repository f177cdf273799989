//go:build !airlock_thin

package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"airlock/audit"
	"airlock/client"
	"airlock/serve"
)

// replayBackend holds the records of sandbox "old" (five commands and a
// background one) and records what a replay does in "new1"; the command
// "date" prints something else the second time.
type replayBackend struct {
	serve.Backend
	mu      sync.Mutex
	created client.CreateRequest
	ran     [][]string
	deleted []string
	net     map[string][]audit.Event // network records by sandbox
}

func finished(argv []string, code int, out string) audit.Event {
	e := audit.New(audit.KindExec, "")
	e.Exec = &audit.Exec{Stage: "finished", Argv: argv, Cwd: "/workspace", ExitCode: &code, DurationMS: 12,
		StdoutHead: out, StdoutBytes: int64(len(out))}
	return e
}

func (b *replayBackend) Logs(_ context.Context, q client.LogQuery, fn func(audit.Event) error) error {
	var evs []audit.Event
	switch q.Sandbox {
	case "old":
		l := audit.New(audit.KindLifecycle, "old")
		l.Lifecycle = &audit.Lifecycle{Stage: "started", Image: "localhost/airlock/template:py-v2", Template: "py:v2", ImageID: "sha256:aa", Policy: "p"}
		evs = append(evs, l)
		for _, c := range [][]string{{"echo", "a"}, {"date"}, {"true"}, {"sh", "-c", "exit 3"}, {"ls"}} {
			evs = append(evs, finished(c, map[bool]int{true: 3}[c[0] == "sh"], "out:"+c[0]+"\n"))
		}
		bg := finished([]string{"sleep", "99"}, 0, "")
		bg.Exec.Background = true
		evs = append(evs, bg)
	case "new1":
		b.mu.Lock()
		for _, c := range b.ran {
			out := "out:" + c[0] + "\n"
			if c[0] == "date" {
				out = "another day\n"
			}
			evs = append(evs, finished(c, map[bool]int{true: 3}[c[0] == "sh"], out))
		}
		b.mu.Unlock()
	}
	evs = append(evs, b.net[q.Sandbox]...)
	for _, e := range evs {
		e.Sandbox = q.Sandbox
		if q.Kind != "" && e.Kind != q.Kind {
			continue
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

func (b *replayBackend) Create(_ context.Context, req client.CreateRequest) (client.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.created = req
	return client.Sandbox{ID: "new1", ImageID: "sha256:aa", Policy: req.Policy, State: "running"}, nil
}

func (b *replayBackend) Exec(_ context.Context, _ string, req client.ExecRequest, _, _ io.Writer) (client.ExecResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ran = append(b.ran, req.Argv)
	return client.ExecResult{}, nil
}

func (b *replayBackend) Delete(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.deleted = append(b.deleted, id)
	return nil
}

// TestSandboxReplay: a replay of a sandbox that ran five commands runs the
// same five (not the background one) in a fresh sandbox of the same
// template version and policy, reports each, flags the one whose output
// changed, exits 1, and removes the fresh sandbox.
func TestSandboxReplay(t *testing.T) {
	b := &replayBackend{}
	sock := filepath.Join(t.TempDir(), "a.sock")
	l, err := serve.ListenUnix(sock, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := serve.NewHTTPServer((&serve.API{Backend: b}).Handler())
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	var out, errb bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&errb)
	t.Cleanup(func() { rootCmd.SetOut(nil); rootCmd.SetErr(nil) })
	if code := run([]string{"sandbox", "replay", "--socket", sock, "old"}); code != 1 {
		t.Errorf("exit %d, want 1 (a command changed)\n%s%s", code, out.String(), errb.String())
	}
	if b.created.Template != "py:v2" || b.created.Policy != "p" || b.created.Image != "" {
		t.Errorf("created %+v", b.created)
	}
	if len(b.ran) != 5 || strings.Join(b.ran[3], " ") != "sh -c exit 3" || len(b.deleted) != 1 || b.deleted[0] != "new1" {
		t.Errorf("ran %q, deleted %v", b.ran, b.deleted)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 7 || strings.Count(out.String(), "CHANGED") != 1 || !strings.Contains(lines[2], "date") ||
		!strings.Contains(lines[2], "CHANGED") || !strings.Contains(lines[4], "3 → 3") || lines[6] != "5 command(s), 1 changed" {
		t.Errorf("output:\n%s", out.String())
	}
}

func netEvent(kind audit.Kind, verdict string, set func(*audit.Event)) audit.Event {
	e := audit.New(kind, "")
	e.Verdict = verdict
	set(&e)
	return e
}

// TestSandboxReplayEgress: the replay prints the egress that differs — a
// request the original made and the replay did not, one only the replay
// made (denied) — not the ones both made alike, and exits 1.
func TestSandboxReplayEgress(t *testing.T) {
	dns := func(e *audit.Event) { e.DNS = &audit.DNS{QName: "registry.example.test", QType: "A"} }
	get := func(e *audit.Event) {
		e.HTTP = &audit.HTTP{Method: "GET", Scheme: "https", Host: "registry.example.test", Path: "/left-pad"}
	}
	paste := func(e *audit.Event) {
		e.Flow = &audit.Flow{Stage: "decision", SNI: "paste.example.test", OrigDst: "198.18.9.9:443"}
	}
	b := &replayBackend{net: map[string][]audit.Event{
		"old":  {netEvent(audit.KindDNS, "allow", dns), netEvent(audit.KindHTTP, "allow", get)},
		"new1": {netEvent(audit.KindDNS, "allow", dns), netEvent(audit.KindFlow, "deny", paste)},
	}}
	sock := filepath.Join(t.TempDir(), "a.sock")
	l, err := serve.ListenUnix(sock, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := serve.NewHTTPServer((&serve.API{Backend: b}).Handler())
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	var out, errb bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&errb)
	t.Cleanup(func() { rootCmd.SetOut(nil); rootCmd.SetErr(nil) })
	if code := run([]string{"sandbox", "replay", "--socket", sock, "old"}); code != 1 {
		t.Errorf("exit %d, want 1\n%s%s", code, out.String(), errb.String())
	}
	_, egress, _ := strings.Cut(out.String(), "changed\n")
	want := "egress: 2 distinct request(s) before, 2 in the replay, 2 differ\n" +
		"  GET https://registry.example.test/left-pad: allowed → not made\n" +
		"  connect paste.example.test:443: not made → denied\n"
	if egress != want {
		t.Errorf("egress section:\n%s\nwant:\n%s", egress, want)
	}
}
