package audit

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestJSONLEmitter(t *testing.T) {
	var buf bytes.Buffer
	j := NewJSONL(&buf)
	want := sampleEvents()
	for _, e := range want {
		j.Emit(e)
	}
	if err := j.Err(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "e.jsonl")
	os.WriteFile(path, buf.Bytes(), 0o600)
	got := decodeLines(t, readLines(t, path))
	if d := cmp.Diff(want, got, ignoreChain, ignoreRange); d != "" {
		t.Errorf("(-emitted +written):\n%s", d)
	}
	if res, err := Verify(path); err != nil || !res.OK() || res.Records != len(want) {
		t.Fatalf("%+v %v", res, err)
	}
	if end := got[len(got)-1].Lifecycle; end.FirstSeq != 2 || end.LastSeq != 13 {
		t.Errorf("lifecycle range %d..%d", end.FirstSeq, end.LastSeq)
	}
}

// Emit does not keep the caller's payload: changing it afterwards does not
// change what is written.
func TestEmitCopies(t *testing.T) {
	w := &blockingWriter{release: make(chan struct{})}
	p := newTestPipeline(t, Config{StreamWriter: w})
	e := New(KindLifecycle, "sb-1")
	code := 3
	e.Lifecycle = &Lifecycle{Stage: "destroyed", ExitCode: &code, Changes: []FileChange{{Path: "/a", Op: "added"}}}
	p.Emit(e)
	code = 99
	e.Lifecycle.Changes[0].Path = "/changed"
	e.Lifecycle.Stage = "started"
	close(w.release)
	flush(t, p)
	p.Close()
	path := filepath.Join(t.TempDir(), "e.jsonl")
	os.WriteFile(path, w.buf, 0o600)
	got := decodeLines(t, readLines(t, path))[0].Lifecycle
	if got.Stage != "destroyed" || *got.ExitCode != 3 || got.Changes[0].Path != "/a" {
		t.Errorf("written %+v", got)
	}
}

// A stream file cut mid-record (a crash) is repaired on open and the chain
// continues from the last whole record.
func TestStreamRepairsPartialLine(t *testing.T) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "events.jsonl")
	p := newTestPipeline(t, Config{StreamPath: stream})
	for _, e := range sampleEvents()[:5] {
		p.Emit(e)
	}
	flush(t, p)
	p.Close()
	f, _ := os.OpenFile(stream, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"schema":1,"kind":"dns","se`)
	f.Close()
	p = newTestPipeline(t, Config{StreamPath: stream})
	for _, e := range sampleEvents()[5:] {
		p.Emit(e)
	}
	flush(t, p)
	p.Close()
	res, err := Verify(stream)
	if err != nil || !res.OK() || res.Records != 15 {
		t.Fatalf("%+v %v", res, err)
	}
}

// A log rotator renames the stream and asks for a reopen (SIGUSR1): the
// next records go to a new file at the path, the renamed one is left
// whole, and the chain runs across both (logs verify reads them together).
func TestStreamReopenAfterRename(t *testing.T) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "events.jsonl")
	rotated := stream + "-20261201-1764547200"
	p := newTestPipeline(t, Config{StreamPath: stream})
	evs := sampleEvents()
	for _, e := range evs[:5] {
		p.Emit(e)
	}
	flush(t, p)
	if err := os.Rename(stream, rotated); err != nil {
		t.Fatal(err)
	}
	if !p.ReopenStream() {
		t.Fatal("ReopenStream: the stream is a file, want true")
	}
	for _, e := range evs[5:] {
		p.Emit(e)
	}
	flush(t, p)
	p.Close()
	for path, want := range map[string]int{rotated: 5, stream: len(evs) - 5} {
		res, err := Verify(path)
		if err != nil {
			t.Fatal(err)
		}
		if res.Records != want {
			t.Errorf("%s: %d records, want %d", filepath.Base(path), res.Records, want)
		}
	}
	res, err := Verify(rotated, stream)
	if err != nil || !res.OK() || res.Records != len(evs) {
		t.Fatalf("the chain across the rename: %+v %v", res, err)
	}
	if q := newTestPipeline(t, Config{StreamWriter: io.Discard}); q.ReopenStream() {
		t.Error("ReopenStream on a writer stream: true, want false")
	}
}
