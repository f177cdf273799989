package audit

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The report's Previews section: one row per preview with who opened it,
// its requests (refused ones counted apart, an aggregate record for as
// many as it stands for), bytes sent and its end.
func TestReportPreviews(t *testing.T) {
	dir := t.TempDir()
	p := newTestPipeline(t, Config{StateDir: dir})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := func(k Kind, verdict, reason string, pv *Preview, in *Ingress) {
		e := New(k, "sb-p")
		e.Time, e.ID, e.Verdict, e.Reason, e.Preview, e.Ingress = at, "pv0123456789abcdef", verdict, reason, pv, in
		at = at.Add(time.Second)
		p.Emit(e)
	}
	ev(KindLifecycle, "", "", nil, nil)
	ev(KindPreview, "", "", &Preview{Stage: "created", Port: 5173, Name: "vite", By: "alice"}, nil)
	ev(KindPreview, "", "", &Preview{Stage: "opened", Port: 5173, Principal: "bob"}, nil)
	ev(KindIngress, "allow", "", nil, &Ingress{Method: "GET", Path: "/", Status: 200, BytesDown: 2048, Client: "198.18.0.9:5"})
	ev(KindIngress, "deny", "", nil, &Ingress{Method: "GET", Path: "/", Status: 401, BytesDown: 100, Client: "198.18.0.9:6"})
	// An aggregate of 7 requests over the preview's rate limit.
	ev(KindIngress, "deny", "", nil, &Ingress{Method: "GET", Path: "/", Status: 429, Client: "198.18.0.9", Count: 7})
	ev(KindPreview, "", "revoked by alice; 1 connections closed", &Preview{Stage: "revoked", Port: 5173}, nil)
	flush(t, p)
	p.Close()
	st, err := OpenStoreReadOnly(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := BuildReport(context.Background(), st, "sb-p")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Previews) != 1 {
		t.Fatalf("previews %+v", r.Previews)
	}
	row := r.Previews[0]
	if row.Port != 5173 || row.By != "alice" || len(row.Opened) != 1 || row.Opened[0] != "bob" || row.Requests != 9 ||
		row.Refused != 8 || row.BytesDown != 2148 || row.End != "revoked" || !strings.Contains(row.State(), "revoked by alice") {
		t.Errorf("row %+v", row)
	}
	var md, html bytes.Buffer
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := r.HTML(&html); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"markdown": md.String(), "html": html.String()} {
		if !strings.Contains(out, "Previews (1)") || !strings.Contains(out, "pv0123456789abcdef") {
			t.Errorf("%s lacks the Previews section", name)
		}
	}
}
