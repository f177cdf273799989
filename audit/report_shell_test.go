package audit

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReportLinksShellRecord: a recorded shell session's exec records name
// its record; the report's command row links it (markdown, relative to
// report.md among the artifacts) and the HTML shows it.
func TestReportLinksShellRecord(t *testing.T) {
	dir := t.TempDir()
	p := newTestPipeline(t, Config{StateDir: dir})
	t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	for i, stage := range []string{"requested", "started", "finished"} {
		e := New(KindExec, "sb-sh")
		e.Time, e.ID = t0.Add(time.Duration(i)*time.Second), "x-1"
		e.Exec = &Exec{Stage: stage, Argv: []string{"/bin/sh"}, TTY: true, Record: "shells/x-1.jsonl"}
		if stage == "finished" {
			e.Exec.ExitCode = new(int)
		}
		p.Emit(e)
	}
	flush(t, p)
	p.Close()
	st, err := OpenStoreReadOnly(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := BuildReport(context.Background(), st, "sb-sh")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Commands) != 1 || r.Commands[0].Record != "shells/x-1.jsonl" {
		t.Fatalf("commands %+v, want one with the record", r.Commands)
	}
	var md, html bytes.Buffer
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "[shells/x-1.jsonl](shells/x-1.jsonl)") {
		t.Errorf("markdown does not link the record:\n%s", md.String())
	}
	if err := r.HTML(&html); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(html.String(), "<code>shells/x-1.jsonl</code>") {
		t.Errorf("html does not name the record")
	}
}
