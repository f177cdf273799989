package audit

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// sampleStore returns a store holding the sample events of sb-1 and, one
// hour later, of sb-2.
func sampleStore(t *testing.T) *Store {
	t.Helper()
	dir := t.TempDir()
	p := newTestPipeline(t, Config{StateDir: dir})
	for _, e := range sampleEvents() {
		p.Emit(e)
	}
	for _, e := range sampleEvents() {
		e.Time = e.Time.Add(time.Hour)
		if e.Gap != nil {
			g := *e.Gap
			g.From, g.To = g.From.Add(time.Hour), g.To.Add(time.Hour)
			e.Gap = &g
		}
		if e.Sandbox != "" {
			e.Sandbox = "sb-2"
		}
		p.Emit(e)
	}
	flush(t, p)
	p.Close()
	st, err := OpenStoreReadOnly(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestQueryFilters(t *testing.T) {
	st := sampleStore(t)
	type res struct {
		Sandbox string
		ID      string
		Kind    Kind
	}
	cases := []struct {
		name string
		q    Query
		want []res
	}{
		{"sandbox and verdict", Query{Sandbox: "sb-1", Verdict: "deny"},
			[]res{{"sb-1", "d2", KindDNS}, {"sb-1", "f2", KindFlow}, {"sb-1", "", KindDrop}}},
		{"would deny", Query{Verdict: "would_deny", Sandbox: "sb-2"}, []res{{"sb-2", "h2", KindHTTP}}},
		{"kind", Query{Kind: KindExec, Sandbox: "sb-2"}, []res{{"sb-2", "x1", KindExec}, {"sb-2", "x1", KindExec}}},
		{"category", Query{Category: "registries", Until: t0.Add(30 * time.Minute)},
			[]res{{"sb-1", "d1", KindDNS}, {"sb-1", "f1", KindFlow}, {"sb-1", "h1", KindHTTP}, {"sb-1", "f1", KindFlow}}},
		{"rule without position", Query{Rule: "deny.hosts[0]"}, []res{{"sb-1", "f2", KindFlow}, {"sb-2", "f2", KindFlow}}},
		{"rule with position", Query{Rule: "deny.hosts[0] (p.toml:20:9)", Sandbox: "sb-2"}, []res{{"sb-2", "f2", KindFlow}}},
		{"rule prefix is not a match", Query{Rule: "deny.hosts"}, nil},
		{"host glob", Query{Host: "*.EXAMPLE.test", Kind: KindDNS, Sandbox: "sb-1"}, []res{{"sb-1", "d1", KindDNS}, {"sb-1", "d2", KindDNS}}},
		{"host glob from sni", Query{Host: "paste.*"}, []res{{"sb-1", "f2", KindFlow}, {"sb-2", "f2", KindFlow}}},
		{"host of approval strips port", Query{Host: "hooks.example.test", Sandbox: "sb-1"}, []res{{"sb-1", "a1", KindApproval}}},
		{"since", Query{Since: t0.Add(time.Hour + 13*time.Second)}, []res{{"", "", KindGap}, {"sb-2", "", KindLifecycle}}},
		{"since until", Query{Since: t0.Add(3 * time.Second), Until: t0.Add(5 * time.Second)}, []res{{"sb-1", "d1", KindDNS}, {"sb-1", "f1", KindFlow}}},
		{"limit", Query{Sandbox: "sb-2", Limit: 2}, []res{{"sb-2", "", KindLifecycle}, {"sb-2", "x1", KindExec}}},
		{"newest", Query{Sandbox: "sb-2", Limit: 2, Newest: true}, []res{{"sb-2", "x1", KindExec}, {"sb-2", "", KindLifecycle}}},
		{"nothing", Query{Sandbox: "sb-3"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := st.Query(context.Background(), tc.q)
			if err != nil {
				t.Fatal(err)
			}
			var got []res
			for _, e := range evs {
				got = append(got, res{e.Sandbox, e.ID, e.Kind})
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestTop(t *testing.T) {
	st := sampleStore(t)
	ctx := context.Background()
	top, err := st.TopDestinations(ctx, Query{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []TopRow{
		{Host: "registry.example.test", Category: "registries", Count: 8, Sandboxes: 2, BytesUp: 1600, BytesDown: 2 * 5000}, // the request's 4096 travel inside the flow
		{Host: "198.18.5.5", Count: 2, Denied: 2, Sandboxes: 2},
		{Host: "docs.example.test", Category: "docs", Count: 2, Denied: 2, Sandboxes: 2, BytesDown: 200},
	}
	if d := cmp.Diff(want, top); d != "" {
		t.Errorf("top destinations (-want +got):\n%s", d)
	}
	den, err := st.TopDenials(ctx, Query{Sandbox: "sb-1"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	wantDen := []TopRow{
		{Host: "198.18.5.5", Rule: "bpf.udp", Count: 1, Denied: 1, Sandboxes: 1},
		{Host: "docs.example.test", Rule: "categories.docs (p.toml:30:1)", Category: "docs", Count: 1, Denied: 1, Sandboxes: 1},
		{Host: "evil.example.test", Rule: "default", Count: 1, Denied: 1, Sandboxes: 1},
		{Host: "paste.example.test", Rule: "deny.hosts[0] (p.toml:20:9)", Count: 1, Denied: 1, Sandboxes: 1},
	}
	if d := cmp.Diff(wantDen, den); d != "" {
		t.Errorf("top denials (-want +got):\n%s", d)
	}
}

func TestRetention(t *testing.T) {
	dir := t.TempDir()
	p := newTestPipeline(t, Config{StateDir: dir})
	now := time.Now()
	e := New(KindDNS, "sb-1")
	e.DNS = &DNS{QName: "x.example.test", QType: "A", RCode: "NOERROR", Answers: []string{"198.18.1.1", "198.18.1.2"}}
	for i := range 3000 {
		e.Time = now.Add(-time.Duration(3000-i) * time.Minute) // the oldest is ~50h old
		p.Emit(e)
	}
	flush(t, p)
	st := p.Store()
	ctx := context.Background()
	n, err := st.Prune(ctx, Retention{MaxAge: 24 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3000-24*60+1 && n != 3000-24*60 {
		t.Fatalf("age retention deleted %d", n)
	}
	left, _ := st.Query(ctx, Query{})
	if left[0].Time.Before(now.Add(-24 * time.Hour)) {
		t.Fatalf("a record older than 24h survived: %v", left[0].Time)
	}
	before, _ := st.Size(ctx)
	n, err = st.Prune(ctx, Retention{MaxBytes: before / 2}, now)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := st.Size(ctx)
	if n == 0 || after > before/2 {
		t.Fatalf("size retention: deleted %d, %d -> %d bytes (bound %d)", n, before, after, before/2)
	}
	rest, _ := st.Query(ctx, Query{})
	if rest[len(rest)-1].Seq != left[len(left)-1].Seq || rest[0].Seq <= left[0].Seq {
		t.Errorf("size retention did not delete the oldest records first")
	}
}

func TestRetentionRunsWhileRunning(t *testing.T) {
	dir := t.TempDir()
	p := newTestPipeline(t, Config{StateDir: dir, Retention: Retention{MaxAge: time.Hour}, RetentionEvery: 5 * time.Millisecond})
	e := New(KindDNS, "sb-1")
	e.DNS = &DNS{QName: "x.example.test", QType: "A", RCode: "NOERROR"}
	e.Time = time.Now().Add(-2 * time.Hour)
	for range 10 {
		p.Emit(e)
	}
	e.Time = time.Now()
	p.Emit(e)
	flush(t, p)
	deadline := time.Now().Add(20 * time.Second)
	for p.Stats().Pruned < 10 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	evs, _ := p.Store().Query(context.Background(), Query{})
	if p.Stats().Pruned != 10 || len(evs) != 1 {
		t.Fatalf("pruned %d, %d left", p.Stats().Pruned, len(evs))
	}
}

// TestQueryUsesIndexes checks that the filters reach their indexes, the
// partial ones included (their condition must be repeated in the query),
// and that a time bound searches by seq through the spans.
func TestQueryUsesIndexes(t *testing.T) {
	st := sampleStore(t)
	for _, c := range []struct {
		q    Query
		plan string
	}{
		{Query{Verdict: "deny"}, "INDEX events_verdict_rare "},
		{Query{Verdict: "ask"}, "INDEX events_verdict_rare "},
		{Query{Category: "docs"}, "INDEX events_category_set "},
		{Query{Sandbox: "sb-1"}, "INDEX events_sandbox "},
		{Query{Kind: KindExec}, "INDEX events_kind_rare "},
		{Query{Kind: KindGap, Since: t0}, "INDEX events_kind_rare "},
		{Query{Host: "registry.example.test"}, "INDEX events_host "},
		{Query{Since: t0}, "USING INTEGER PRIMARY KEY (rowid>?)"},
		{Query{Until: t0}, "USING INTEGER PRIMARY KEY (rowid<?)"},
		{Query{Sandbox: "sb-1", Since: t0}, "INDEX events_sandbox (sandbox=? AND rowid>?)"},
	} {
		where, args := sqlWhere(&c.q)
		rows, err := st.db.QueryContext(context.Background(), `EXPLAIN QUERY PLAN SELECT raw FROM events`+where, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if got := strings.Join(plan, "; "); !strings.Contains(got, c.plan) {
			t.Errorf("%+v: plan %q does not use %s", c.q, got, c.plan)
		}
	}
}
