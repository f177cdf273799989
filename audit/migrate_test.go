package audit

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// layout1Schema is the table layout stores were created with before
// layout 2 (kept here to test the migration).
const layout1Schema = `
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events (
	seq INTEGER PRIMARY KEY, time INTEGER NOT NULL, kind TEXT NOT NULL, sandbox TEXT NOT NULL,
	id TEXT NOT NULL, verdict TEXT NOT NULL, category TEXT NOT NULL, rule TEXT NOT NULL,
	host TEXT NOT NULL, would_deny INTEGER NOT NULL, raw BLOB NOT NULL);
CREATE INDEX events_time ON events (time);
CREATE INDEX events_sandbox ON events (sandbox, time);
CREATE INDEX events_kind ON events (kind, time);
CREATE INDEX events_verdict_rare ON events (verdict, time) WHERE verdict NOT IN ('', 'allow');
CREATE INDEX events_category_set ON events (category, time) WHERE category != '';
CREATE INDEX events_host ON events (host);
INSERT INTO meta VALUES ('schema', '1');
`

// layout1Store writes the sample events, chained, into a layout 1 store.
func layout1Store(t *testing.T) (string, []Event) {
	t.Helper()
	path := filepath.Join(t.TempDir(), StoreFile)
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(layout1Schema); err != nil {
		t.Fatal(err)
	}
	seq := newSequencer()
	for _, e := range sampleEvents() {
		r, err := encode(e)
		if err != nil {
			t.Fatal(err)
		}
		l, err := seq.next(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, int64(l.seq), r.time,
			string(r.kind), r.sandbox, e.ID, r.verdict, r.category, e.Rule, r.host, r.wouldDeny, l.raw); err != nil {
			t.Fatal(err)
		}
	}
	want, err := readJSONLines(t, path)
	if err != nil {
		t.Fatal(err)
	}
	return path, want
}

// readJSONLines decodes the raw column of a store of any layout.
func readJSONLines(t *testing.T, path string) ([]Event, error) {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.Query(`SELECT raw FROM events ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, err
		}
		out = append(out, decodeLines(t, [][]byte{raw})...)
	}
	return out, rows.Err()
}

func TestStoreMigratesLayout1(t *testing.T) {
	path, want := layout1Store(t)
	if _, err := OpenStoreReadOnly(path); err == nil || !strings.Contains(err.Error(), "table layout 1") {
		t.Fatalf("read-only open of a layout 1 store: %v, want an error naming the layout", err)
	}
	st, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	got, err := st.Query(ctx, Query{})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("records changed by the migration (-want +got):\n%s", d)
	}
	// The filters work on the migrated store, time and rule included.
	for _, c := range []struct {
		q    Query
		want int
	}{
		{Query{Sandbox: "sb-1", Verdict: "deny"}, 3},
		{Query{Since: t0.Add(13 * 1e9)}, 2},
		{Query{Until: t0.Add(2 * 1e9)}, 2},
		{Query{Rule: "deny.hosts[0]"}, 1},
		{Query{Kind: KindExec}, 2},
	} {
		evs, err := st.Query(ctx, c.q)
		if err != nil || len(evs) != c.want {
			t.Errorf("%+v on the migrated store: %d records, %v; want %d", c.q, len(evs), err, c.want)
		}
	}
	ro, err := OpenStoreReadOnly(path)
	if err != nil {
		t.Fatalf("read-only open after the migration: %v", err)
	}
	ro.Close()
}

func TestStoreMigrationContinuesTheChain(t *testing.T) {
	path, want := layout1Store(t)
	p := newTestPipeline(t, Config{StateDir: filepath.Dir(path)})
	e := New(KindDNS, "sb-9")
	e.DNS = &DNS{QName: "after.example.test", QType: "A", RCode: "NOERROR"}
	p.Emit(e)
	flush(t, p)
	got, err := p.Store().Query(context.Background(), Query{Sandbox: "sb-9"})
	if err != nil || len(got) != 1 {
		t.Fatalf("record after the migration: %v, %v", got, err)
	}
	if got[0].Seq != want[len(want)-1].Seq+1 || got[0].PrevHash == "" {
		t.Fatalf("the chain did not continue after the migration: seq %d prev %q after seq %d",
			got[0].Seq, got[0].PrevHash, want[len(want)-1].Seq)
	}
}

func TestStoreRefusesNewerLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), StoreFile)
	st, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.w.Exec(`UPDATE meta SET value = '99' WHERE key = 'layout'`); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := OpenStore(path); err == nil || !strings.Contains(err.Error(), "layout 99") {
		t.Fatalf("open of a newer layout: %v, want an error naming it", err)
	}
	if _, err := OpenStoreReadOnly(path); err == nil || !strings.Contains(err.Error(), "layout 99") {
		t.Fatalf("read-only open of a newer layout: %v, want an error naming it", err)
	}
}
