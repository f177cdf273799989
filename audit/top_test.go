package audit

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The review's data (users.md S4): two flows of 1,200 bytes up each, and
// seven requests of 310 bytes inside them. The host sent 2,400 bytes, not
// 4,570.
func bytesOnceEvents() []Event {
	var out []Event
	for i, id := range []string{"f1", "f2"} {
		e := New(KindFlow, "sb-1")
		e.Time = t0.Add(-1)
		e.ID, e.Verdict, e.Category = id, "allow", "registries"
		e.Flow = &Flow{Stage: "decision", Host: "artifactory.acme.test", OrigDst: "198.18.1.1:443"}
		out = append(out, e)
		for j := range 3 + i { // 3 requests in f1, 4 in f2
			h := New(KindHTTP, "sb-1")
			h.ID, h.Verdict, h.Category = id+"-h"+string(rune('0'+j)), "allow", "registries"
			h.HTTP = &HTTP{Method: "GET", Scheme: "https", Host: "artifactory.acme.test", Path: "/x", Status: 200, BytesUp: 310, BytesDown: 50, FlowID: id}
			out = append(out, h)
		}
		c := New(KindFlow, "sb-1")
		c.ID, c.Verdict, c.Category = id, "allow", "registries"
		c.Flow = &Flow{Stage: "close", Host: "artifactory.acme.test", BytesUp: 1200, BytesDown: 400}
		out = append(out, c)
	}
	// A plain request with no enclosing flow counts its own bytes.
	h := New(KindHTTP, "sb-1")
	h.Verdict = "allow"
	h.HTTP = &HTTP{Method: "GET", Scheme: "http", Host: "plain.example.test", Path: "/", BytesUp: 10, BytesDown: 20}
	return append(out, h)
}

func TestTopCountsBytesOnce(t *testing.T) {
	want := []TopRow{
		{Host: "artifactory.acme.test", Category: "registries", Count: 11, Sandboxes: 1, BytesUp: 2400, BytesDown: 800},
		{Host: "plain.example.test", Count: 1, Sandboxes: 1, BytesUp: 10, BytesDown: 20},
	}
	tl := NewTally()
	for _, e := range bytesOnceEvents() {
		tl.Add(&e)
	}
	if d := cmp.Diff(want, tl.Destinations(10)); d != "" {
		t.Errorf("tally (-want +got):\n%s", d)
	}
	dir := t.TempDir()
	p := newTestPipeline(t, Config{StateDir: dir})
	for _, e := range bytesOnceEvents() {
		p.Emit(e)
	}
	flush(t, p)
	p.Close()
	st, err := OpenStoreReadOnly(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.TopDestinations(context.Background(), Query{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("store (-want +got):\n%s", d)
	}
}

// The tally gives what the store's top lists give, on the same events.
func TestTallyMatchesStore(t *testing.T) {
	st := sampleStore(t)
	ctx := context.Background()
	tl := NewTally()
	if err := st.Each(ctx, Query{}, func(e Event) error { tl.Add(&e); return nil }); err != nil {
		t.Fatal(err)
	}
	dest, _ := st.TopDestinations(ctx, Query{}, 50)
	if d := cmp.Diff(dest, tl.Destinations(50)); d != "" {
		t.Errorf("destinations (-store +tally):\n%s", d)
	}
	den, _ := st.TopDenials(ctx, Query{}, 50)
	if d := cmp.Diff(den, tl.Denials(50)); d != "" {
		t.Errorf("denials (-store +tally):\n%s", d)
	}
}
