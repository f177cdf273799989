//go:build !airlock_thin

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock/audit"
)

// seedStore records a small, known set of events into a fresh state
// directory (and a JSONL stream beside it) and returns the directory.
func seedAuditStore(t *testing.T, evs []audit.Event) string {
	t.Helper()
	dir := t.TempDir()
	p, err := audit.NewPipeline(audit.Config{StateDir: dir, StreamPath: filepath.Join(dir, "events.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		p.Emit(e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func auditEv(k audit.Kind, sandbox, verdict, rule, category string, at time.Time) audit.Event {
	e := audit.New(k, sandbox)
	e.Time, e.Verdict, e.Rule, e.Category = at, verdict, rule, category
	return e
}

func logsFixture(now time.Time) []audit.Event {
	var out []audit.Event
	e := auditEv(audit.KindDNS, "sb-1", "allow", "categories.registries.hosts[0] (p.toml:5:9)", "registries", now.Add(-2*time.Hour))
	e.DNS = &audit.DNS{QName: "registry.example.test", QType: "A", RCode: "NOERROR", Answers: []string{"198.18.1.1"}}
	out = append(out, e)
	e = auditEv(audit.KindFlow, "sb-1", "deny", "deny.hosts[0] (p.toml:20:9)", "", now.Add(-90*time.Minute))
	e.Flow = &audit.Flow{Stage: "decision", Source: "198.18.0.2:4000", SNI: "paste.example.test", OrigDst: "198.18.9.9:443", Handling: "none"}
	out = append(out, e)
	e = auditEv(audit.KindHTTP, "sb-2", "allow", "categories.git.hosts[0] (p.toml:9:9)", "git", now.Add(-time.Hour))
	e.HTTP = &audit.HTTP{Method: "GET", Scheme: "https", Host: "git.example.test", Path: "/org/repo/info/refs", Status: 200, BytesDown: 900}
	out = append(out, e)
	e = auditEv(audit.KindDNS, "sb-2", "deny", "default", "", now.Add(-30*time.Minute))
	e.DNS = &audit.DNS{QName: "exfil.example.test", QType: "TXT", RCode: "NXDOMAIN"}
	out = append(out, e)
	return out
}

func runLogsCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newLogsCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	cmd.SetContext(context.Background())
	err := cmd.Execute()
	return out.String(), err
}

func TestLogsTableAndFilters(t *testing.T) {
	dir := seedAuditStore(t, logsFixture(time.Now()))
	out, err := runLogsCmd(t, "--state-dir", dir, "--verdict", "deny", "--since", "100m")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TIME") ||
		!strings.Contains(lines[1], "paste.example.test") || !strings.Contains(lines[2], "exfil.example.test") {
		t.Fatalf("table:\n%s", out)
	}
	col := strings.Index(lines[0], "DETAIL")
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l[col:], "decision") && !strings.HasPrefix(l[col:], "TXT") {
			t.Errorf("DETAIL column not aligned at %d:\n%s", col, out)
		}
	}

	out, err = runLogsCmd(t, "--state-dir", dir, "--host", "*.example.test", "--kind", "http", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var e audit.Event
	if err := json.Unmarshal([]byte(out), &e); err != nil || e.HTTP == nil || e.HTTP.Host != "git.example.test" || e.Seq != 3 {
		t.Fatalf("json: %v %q", err, out)
	}

	for _, bad := range [][]string{{"--kind", "dnss"}, {"--since", "yesterday"}, {"--verdict", "maybe"}, {"--since", "1h", "--until", "2h"}} {
		if _, err := runLogsCmd(t, append([]string{"--state-dir", dir}, bad...)...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	if _, err := runLogsCmd(t, "--state-dir", t.TempDir()); !errors.Is(err, audit.ErrNoStore) {
		t.Errorf("empty state dir: %v", err)
	}
}

func TestLogsTop(t *testing.T) {
	dir := seedAuditStore(t, logsFixture(time.Now()))
	out, err := runLogsCmd(t, "top", "--state-dir", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var top struct{ Destinations, Denials []audit.TopRow }
	if err := json.Unmarshal([]byte(out), &top); err != nil {
		t.Fatal(err)
	}
	if len(top.Destinations) != 4 || len(top.Denials) != 2 || top.Denials[0].Host != "exfil.example.test" {
		t.Fatalf("top: %+v", top)
	}
	out, err = runLogsCmd(t, "top", "--state-dir", dir, "--sandbox", "sb-2")
	if err != nil || !strings.Contains(out, "TOP DENIALS") || !strings.Contains(out, "git.example.test") || strings.Contains(out, "paste") {
		t.Fatalf("top table: %v\n%s", err, out)
	}
}

func TestLogsVerify(t *testing.T) {
	dir := seedAuditStore(t, logsFixture(time.Now()))
	stream := filepath.Join(dir, "events.jsonl")
	out, err := runLogsCmd(t, "verify", stream)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); err != nil || !strings.HasPrefix(lines[len(lines)-1], "ok: 4 records") {
		t.Fatalf("intact: %v %s", err, out)
	}
	b, _ := os.ReadFile(stream)
	os.WriteFile(stream, bytes.Replace(b, []byte(`"deny"`), []byte(`"allow"`), 1), 0o600)
	out, err = runLogsCmd(t, "verify", stream)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(out, stream+":2: modified") {
		t.Fatalf("edited line 2: %v\n%s", err, out)
	}
}

func TestLogsFollow(t *testing.T) {
	now := time.Now()
	dir := t.TempDir()
	p, err := audit.NewPipeline(audit.Config{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fx := logsFixture(now)
	p.Emit(fx[0])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p.Flush(ctx)
	pr, pw, _ := os.Pipe()
	defer pr.Close()
	done := make(chan error, 1)
	go func() {
		o := &logsOptions{sourceFlags: sourceFlags{stateDir: dir, poll: 10 * time.Millisecond},
			eventFlags: eventFlags{match: audit.Fields{Kind: []string{"dns"}}}, output: "jsonl", follow: true}
		done <- runLogs(ctx, pw, o)
		pw.Close()
	}()
	dec := json.NewDecoder(pr)
	var e audit.Event
	if err := dec.Decode(&e); err != nil || e.DNS.QName != "registry.example.test" {
		t.Fatalf("first: %v %+v", err, e)
	}
	p.Emit(fx[1]) // a flow: filtered out
	p.Emit(fx[3])
	if err := dec.Decode(&e); err != nil || e.DNS == nil || e.DNS.QName != "exfil.example.test" {
		t.Fatalf("followed: %v %+v", err, e)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestReportCommand(t *testing.T) {
	now := time.Now()
	fx := logsFixture(now)
	end := auditEv(audit.KindLifecycle, "sb-1", "", "", "", now)
	end.Lifecycle = &audit.Lifecycle{Stage: "destroyed"}
	dir := seedAuditStore(t, append(fx, end))
	cmd := newReportCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	html := filepath.Join(t.TempDir(), "sb-1.html")
	cmd.SetArgs([]string{"sb-1", "--state-dir", dir, "--html", html})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(html)
	if err != nil || !bytes.Contains(b, []byte(`<section id="denied">`)) || !bytes.Contains(b, []byte("paste.example.test")) ||
		!bytes.Contains(b, []byte("match")) {
		t.Fatalf("html report: %v\n%.500s", err, b)
	}
	cmd = newReportCmd()
	out.Reset()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"sb-9", "--state-dir", dir})
	if err := cmd.Execute(); !errors.Is(err, audit.ErrNoEvents) {
		t.Fatalf("unknown sandbox: %v", err)
	}
}
