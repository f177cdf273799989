package serve

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock/audit"
	"airlock/client"
	"airlock/policies"
	"airlock/proxy"
)

func heldReq(id string) proxy.Hold {
	return proxy.Hold{ID: id, Sandbox: "sb1", Destination: "hooks.example.test:443 POST /hooks/ci",
		Verdict: policies.Verdict{Action: policies.ActionAsk, Category: "webhooks", Rule: policies.Rule{Name: "categories.webhooks"}}}
}

// waitHeld polls until n requests are held (bounded by the test context).
func waitHeld(t *testing.T, a *Approvals, n int) []client.Approval {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		var held []client.Approval
		for _, x := range a.List() {
			if x.State == "held" {
				held = append(held, x)
			}
		}
		if len(held) == n {
			return held
		}
		select {
		case <-ctx.Done():
			t.Fatalf("want %d held requests, have %d", n, len(held))
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestApprovalsApproveOnceDenyAndStanding(t *testing.T) {
	rec := &recorder{}
	a := newApprovals(rec, time.Minute, func(string) string { return "npm publish" })
	ctx := context.Background()

	got := make(chan bool, 1)
	go func() { ok, _ := a.Ask(ctx, heldReq("r1")); got <- ok }()
	held := waitHeld(t, a, 1)
	if held[0].Command != "npm publish" || held[0].Rule != "categories.webhooks" {
		t.Errorf("held = %+v", held[0])
	}
	if _, err := a.Decide("r1", client.Decision{Approve: true, Once: true}, "alice (uid 1000)"); err != nil {
		t.Fatal(err)
	}
	if !<-got {
		t.Fatal("approved request was not let through")
	}

	go func() { ok, _ := a.Ask(ctx, heldReq("r2")); got <- ok }()
	waitHeld(t, a, 1)
	if _, err := a.Decide("r2", client.Decision{}, "bob (uid 1001)"); err != nil {
		t.Fatal(err)
	}
	if <-got {
		t.Fatal("denied request was let through")
	}
	if _, err := a.Decide("r2", client.Decision{Approve: true}, "bob"); !client.IsCode(err, client.CodeNotFound) {
		t.Errorf("deciding twice: %v, want not_found", err)
	}

	// --for: the next request to the same destination passes without a hold.
	go func() { ok, _ := a.Ask(ctx, heldReq("r3")); got <- ok }()
	waitHeld(t, a, 1)
	if _, err := a.Decide("r3", client.Decision{Approve: true, For: client.Duration(time.Hour)}, "carol"); err != nil {
		t.Fatal(err)
	}
	<-got
	if ok, _ := a.Ask(ctx, heldReq("r4")); !ok {
		t.Error("standing approval not applied")
	}

	var stages, deciders []string
	for _, e := range rec.kind(audit.KindApproval) {
		stages = append(stages, e.Approval.Stage)
		deciders = append(deciders, e.Approval.DecidedBy)
	}
	if got, want := strings.Join(stages, ","), "held,approved,held,denied,held,approved,approved"; got != want {
		t.Errorf("approval events = %s, want %s", got, want)
	}
	if !strings.Contains(strings.Join(deciders, ","), "alice (uid 1000)") || !strings.Contains(strings.Join(deciders, ","), "bob (uid 1001)") {
		t.Errorf("decisions do not name who decided: %v", deciders)
	}
}

func TestApprovalsTimeoutDenies(t *testing.T) {
	rec := &recorder{}
	a := newApprovals(rec, time.Millisecond, nil)
	ok, err := a.Ask(context.Background(), heldReq("r1"))
	if ok || err != nil {
		t.Fatalf("timed-out hold = %v, %v; want denied", ok, err)
	}
	ev := rec.kind(audit.KindApproval)
	if len(ev) != 2 || ev[1].Approval.Stage != "expired" || ev[1].Verdict != "deny" {
		t.Errorf("events = %+v", ev)
	}
}

func TestSecretsFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secrets")
	os.WriteFile(path, []byte("# store\nstaging-token = s3cret\n\nother=x=y\n"), 0o644)
	if _, err := loadSecrets(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("0644 store: %v, want a refusal saying chmod 600", err)
	}
	os.Chmod(path, 0o600)
	s, err := loadSecrets(path)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := s.Lookup("sb1", "staging-token"); !ok || v != "s3cret" {
		t.Errorf("lookup = %q, %v", v, ok)
	}
	if v, _ := s.Lookup("sb1", "other"); v != "x=y" {
		t.Errorf("value with '=' = %q", v)
	}
	if _, err := s.SetTask("sb1", map[string]string{"staging-token": "task-value"}, nil); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Lookup("sb1", "staging-token"); v != "task-value" {
		t.Errorf("task secret does not win: %q", v)
	}
	if v, _ := s.Lookup("sb2", "staging-token"); v != "s3cret" {
		t.Errorf("task secret leaked to another sandbox: %q", v)
	}
	s.Forget("sb1")
	if v, _ := s.Lookup("sb1", "staging-token"); v != "s3cret" {
		t.Errorf("after forget: %q", v)
	}
	os.WriteFile(path, []byte("this line holds hunter2 but no equals sign\n"), 0o600)
	if _, err := loadSecrets(path); err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), ":1:") {
		t.Errorf("bad line: %v (must be positioned and must not echo the line)", err)
	}
}

func TestTapSummaryAndMetrics(t *testing.T) {
	m := newMetrics(func() audit.Stats { return audit.Stats{QueueDepth: 7, Dropped: 3} })
	tp := newTap(audit.Discard, m)
	emit := func(k audit.Kind, verdict, cat, rule string, fill func(*audit.Event)) {
		e := audit.New(k, "sb1")
		e.Verdict, e.Category, e.Rule = verdict, cat, rule
		fill(&e)
		tp.Emit(e)
	}
	emit(audit.KindDNS, "allow", "git", "categories.git.hosts[0]", func(e *audit.Event) {
		e.DNS = &audit.DNS{QName: "git.example.test.", RCode: "NOERROR"}
	})
	emit(audit.KindDNS, "deny", "", "default", func(e *audit.Event) { e.DNS = &audit.DNS{QName: "evil.test.", RCode: "NXDOMAIN"} })
	emit(audit.KindFlow, "allow", "git", "categories.git.hosts[0]", func(e *audit.Event) {
		e.Flow = &audit.Flow{Stage: "decision", SNI: "git.example.test"}
	})
	emit(audit.KindFlow, "allow", "git", "", func(e *audit.Event) { e.Flow = &audit.Flow{Stage: "close"} })
	emit(audit.KindHTTP, "deny", "git", "categories.git.push", func(e *audit.Event) {
		e.HTTP = &audit.HTTP{Host: "git.example.test", Method: "POST"}
	})
	emit(audit.KindDrop, "deny", "", "kernel:udp", func(e *audit.Event) {
		e.Reason = "udp"
		e.Drop = &audit.Drop{Protocol: "udp", Dest: "198.18.0.99", Port: 443, Count: 5}
	})
	emit(audit.KindExec, "", "", "", func(e *audit.Event) { e.Exec = &audit.Exec{Stage: "started", Argv: []string{"git", "push"}} })
	if got := tp.Running("sb1"); got != "git push" {
		t.Errorf("running = %q", got)
	}
	s := tp.Summary("sb1")
	if len(s.Categories) != 1 || s.Categories[0].Category != "git" || s.Categories[0].Requests != 1 {
		t.Errorf("categories = %+v (close records must not count)", s.Categories)
	}
	if len(s.Denied) != 3 || s.Drops != 5 || strings.Join(s.DNSNames, ",") != "evil.test,git.example.test" {
		t.Errorf("summary = %+v", s)
	}

	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`airlock_decisions_total{category="git",kind="flow",verdict="allow"} 1`,
		`airlock_decisions_total{category="git",kind="http",verdict="deny"} 1`,
		`airlock_dns_queries_total{rcode="NXDOMAIN",verdict="deny"} 1`,
		`airlock_kernel_drops_total{reason="udp"} 5`,
		`airlock_audit_queue_depth 7`,
		`airlock_audit_dropped_total 3`,
		`airlock_audit_failing 0`, // docs/events.md's whole set, one exporter
		`airlock_audit_stream_errors_total 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestMetricsCategoryLabelBounded(t *testing.T) {
	m := newMetrics(nil)
	for i := 0; i < maxCategories+50; i++ {
		e := audit.New(audit.KindHTTP, "sb")
		e.Verdict, e.Category = "allow", "cat"+strings.Repeat("x", i)
		m.observe(&e)
	}
	if len(m.categories) != maxCategories {
		t.Errorf("%d category labels, want the bound %d", len(m.categories), maxCategories)
	}
	if got := m.category("a-new-one"); got != otherCategory {
		t.Errorf("past the bound: %q, want %q", got, otherCategory)
	}
}

func TestTapKeepsBoundedSummaries(t *testing.T) {
	tp := newTap(audit.Discard, nil)
	for i := 0; i < maxSummaries+10; i++ {
		e := audit.New(audit.KindDNS, fmt.Sprintf("sb%d", i))
		e.DNS = &audit.DNS{QName: "x.test"}
		tp.Emit(e)
	}
	if len(tp.sums) != maxSummaries {
		t.Errorf("%d summaries kept, want %d", len(tp.sums), maxSummaries)
	}
	if _, ok := tp.sums["sb0"]; ok {
		t.Error("the oldest summary was kept")
	}
}
