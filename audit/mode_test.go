package audit

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStoreIsPrivate: audit.db holds every request every sandbox made; it
// was created 0644. The store and its WAL files are StoreMode, a new one
// and one left looser alike.
func TestStoreIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, StoreFile)
	check := func(when string) {
		t.Helper()
		st, err := OpenStore(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if m := fi.Mode().Perm(); m != StoreMode {
				t.Errorf("%s: %s is %04o, want %04o", when, filepath.Base(p), m, StoreMode)
			}
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	check("new store")
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("store directory: %v %v, want 0700", fi.Mode().Perm(), err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	check("store left 0644")
	fifo := filepath.Join(t.TempDir(), StoreFile)
	if err := os.Symlink("/dev/zero", fifo); err != nil {
		t.Fatal(err)
	}
	if s, err := OpenStore(fifo); err == nil {
		s.Close()
		t.Error("a store linked to /dev/zero was opened")
	}
}

// TestStreamRefusesFIFO: a FIFO where the JSONL stream goes hung the start
// (its last line is read back for the hash chain); it is refused by name.
func TestStreamRefusesFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		s, _, err := openFileSink(path, 1<<20, 2)
		if err == nil {
			s.f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), path) {
			t.Errorf("openFileSink(FIFO): %v, want a refusal naming it", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("openFileSink(FIFO) did not return within 5s")
	}
}
