package runner

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"airlock/audit"
)

// TestCommandRecorderKeepsFileOpen: a sandbox's records go to one open
// commands.jsonl, in order, closed when the sandbox ends; a sandbox with no
// state directory gets none.
func TestCommandRecorderKeepsFileOpen(t *testing.T) {
	state := t.TempDir()
	dir := filepath.Join(state, "sandboxes")
	const id, gone = "0123456789ab", "ba9876543210"
	if err := os.MkdirAll(filepath.Join(dir, id), 0o700); err != nil {
		t.Fatal(err)
	}
	var passed int
	c := &commandRecorder{next: audit.EmitterFunc(func(audit.Event) { passed++ }), dir: dir}
	exec := func(sb, stage string) {
		e := audit.New(audit.KindExec, sb)
		e.Exec = &audit.Exec{Stage: stage, Argv: []string{"true"}}
		c.Emit(e)
	}
	for _, st := range []string{"requested", "started", "finished"} {
		exec(id, st)
		exec(gone, st)
	}
	if len(c.files) != 1 || c.files[id] == nil {
		t.Fatalf("open files: %v, want the one of %s", c.files, id)
	}
	path := filepath.Join(dir, id, "commands.jsonl")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("\n")); n != 3 || int64(len(b)) != c.files[id].size {
		t.Fatalf("commands.jsonl has %d lines, %d bytes (tracked %d):\n%s", n, len(b), c.files[id].size, b)
	}
	if i, j := bytes.Index(b, []byte(`"requested"`)), bytes.Index(b, []byte(`"finished"`)); i < 0 || j < i {
		t.Fatalf("records out of order:\n%s", b)
	}
	if _, err := os.Stat(filepath.Join(dir, gone)); !os.IsNotExist(err) {
		t.Fatalf("a record created the state directory of %s: %v", gone, err)
	}
	r := &Runner{cfg: Config{StateDir: state}, commands: c}
	if err := r.removeState(id); err != nil {
		t.Fatal(err)
	}
	if len(c.files) != 0 {
		t.Fatalf("the file stayed open after the sandbox ended: %v", c.files)
	}
	if passed != 6 {
		t.Fatalf("%d events passed on, want 6", passed)
	}
	// A special file planted at the path is not opened (nor waited on).
	fifo := filepath.Join(dir, gone)
	if err := os.MkdirAll(fifo, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(fifo, "commands.jsonl"), 0o600); err != nil {
		t.Fatal(err)
	}
	exec(gone, "requested")
	if len(c.files) != 0 {
		t.Fatalf("a FIFO was opened as commands.jsonl: %v", c.files)
	}
}
