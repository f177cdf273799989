package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 123456789, time.UTC)

func intp(i int) *int { return &i }

// sampleEvents returns one event of every kind, in a plausible order for
// sandbox "sb-1", at t0 plus a second per event.
func sampleEvents() []Event {
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	ev := func(i int, k Kind) Event {
		e := New(k, "sb-1")
		e.Time = at(i)
		return e
	}
	var out []Event
	add := func(e Event) { out = append(out, e) }

	e := ev(0, KindPolicy)
	e.Sandbox = ""
	e.Policy = &Policy{Action: "loaded", Name: "coding-agent", NewHash: "sha256:aa"}
	add(e)
	e = ev(1, KindLifecycle)
	e.Lifecycle = &Lifecycle{Stage: "started", Image: "airlock/agent:1", Policy: "coding-agent", PolicyHash: "sha256:aa", Address: "198.18.0.2"}
	add(e)
	e = ev(2, KindExec)
	e.ID = "x1"
	e.Exec = &Exec{Stage: "started", Argv: []string{"npm", "install"}, Cwd: "/workspace"}
	add(e)
	e = ev(3, KindDNS)
	e.ID, e.Verdict, e.Rule, e.Category = "d1", "allow", "categories.registries.hosts[0] (p.toml:4:11)", "registries"
	e.DNS = &DNS{QName: "registry.example.test.", QType: "A", RCode: "NOERROR", Answers: []string{"198.18.1.1"}, LatencyUS: 900, Client: "198.18.0.2:5353"}
	add(e)
	e = ev(4, KindFlow)
	e.ID, e.Verdict, e.Rule, e.Category = "f1", "allow", "categories.registries.hosts[0] (p.toml:4:11)", "registries"
	e.Flow = &Flow{Stage: "decision", Source: "198.18.0.2:40000", OrigDst: "198.18.1.1:443", Dialed: "198.18.1.1:443", SNI: "registry.example.test", Host: "registry.example.test", Mode: "transparent", Handling: "inspect"}
	add(e)
	e = ev(5, KindHTTP)
	e.ID, e.Verdict, e.Rule, e.Category = "h1", "allow", "categories.registries.methods (p.toml:5:1)", "registries"
	e.HTTP = &HTTP{Method: "GET", Scheme: "https", Host: "registry.example.test", Path: "/left-pad/-/left-pad-1.3.0.tgz", Status: 200, BytesDown: 4096, FlowID: "f1", Injected: []string{"registry-token"}, Package: &Package{Ecosystem: "npm", Name: "left-pad", Version: "1.3.0"}}
	add(e)
	e = ev(6, KindFlow)
	e.ID, e.Verdict, e.Rule, e.Category = "f1", "allow", "categories.registries.hosts[0] (p.toml:4:11)", "registries"
	e.Flow = &Flow{Stage: "close", Source: "198.18.0.2:40000", Host: "registry.example.test", BytesUp: 800, BytesDown: 5000, DurationMS: 120, CloseReason: "eof"}
	add(e)
	e = ev(7, KindDNS)
	e.ID, e.Verdict, e.Rule, e.Reason = "d2", "deny", "default", "no category allows this name"
	e.DNS = &DNS{QName: "evil.example.test", QType: "A", RCode: "NXDOMAIN"}
	add(e)
	e = ev(8, KindFlow)
	e.ID, e.Verdict, e.Rule, e.Reason = "f2", "deny", "deny.hosts[0] (p.toml:20:9)", "host is in [deny]"
	e.Flow = &Flow{Stage: "decision", Source: "198.18.0.2:40002", OrigDst: "198.18.9.9:443", SNI: "paste.example.test", Mode: "transparent", Handling: "none"}
	add(e)
	e = ev(9, KindHTTP)
	e.ID, e.Verdict, e.Rule, e.Category, e.WouldDeny = "h2", "audit", "categories.docs (p.toml:30:1)", "docs", true
	e.HTTP = &HTTP{Method: "GET", Scheme: "https", Host: "docs.example.test", Path: "/guide", Status: 200, BytesDown: 100}
	add(e)
	e = ev(10, KindDrop)
	e.Verdict, e.Rule = "deny", "bpf.udp"
	e.Drop = &Drop{Protocol: "udp", Source: "198.18.0.2", Dest: "198.18.5.5", Port: 123, Count: 3}
	add(e)
	e = ev(11, KindApproval)
	e.ID, e.Verdict = "a1", "ask"
	e.Approval = &Approval{Stage: "held", Destination: "hooks.example.test:443", Command: "curl"}
	add(e)
	e = ev(12, KindExec)
	e.ID = "x1"
	e.Exec = &Exec{Stage: "finished", Argv: []string{"npm", "install"}, ExitCode: intp(0), DurationMS: 3100}
	add(e)
	e = ev(13, KindGap)
	e.Sandbox = ""
	e.Gap = &Gap{Dropped: 7, From: at(12), To: at(13)}
	add(e)
	e = ev(14, KindLifecycle)
	e.Lifecycle = &Lifecycle{Stage: "destroyed", ExitCode: intp(0), Changes: []FileChange{{Path: "/workspace/package-lock.json", Op: "modified", Size: 1200}}}
	add(e)
	return out
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

func newTestPipeline(t *testing.T, cfg Config) *Pipeline {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	p, err := NewPipeline(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func flush(t *testing.T, p *Pipeline) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func readLines(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, append([]byte(nil), sc.Bytes()...))
	}
	return out
}

func decodeLines(t *testing.T, lines [][]byte) []Event {
	t.Helper()
	var out []Event
	for _, l := range lines {
		var e Event
		if err := json.Unmarshal(l, &e); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, e)
	}
	return out
}

func writeLines(t *testing.T, path string, lines [][]byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		f.Write(append(l, '\n'))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

var _ = io.Discard
