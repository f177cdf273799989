//go:build !airlock_thin

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPolicyCheckRefusesIrregularFiles: `policy check` hung on a FIFO and
// read /dev/zero until the kernel killed it. Each must fail promptly with
// an error naming the file and what it is.
func TestPolicyCheckRefusesIrregularFiles(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.toml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, []byte("version = 1\n#"+strings.Repeat("x", 4<<20)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "p.toml"), []byte("version = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.toml")
	if err := os.Symlink(filepath.Join(outside, "p.toml"), out); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		fifo: "not a regular file: it is a named pipe (FIFO)",
		zero: "path leaves its directory",
		big:  "file is too large: above the 4 MiB cap",
		out:  "path leaves its directory",
	} {
		type result struct {
			errs string
			code int
		}
		done := make(chan result, 1)
		go func() { _, errs, code := runPolicy(t, "check", file); done <- result{errs, code} }()
		select {
		case r := <-done:
			if r.code != 1 || !strings.Contains(r.errs, file) || !strings.Contains(r.errs, want) {
				t.Errorf("check %s: exit %d, stderr %q; want 1 and %q", filepath.Base(file), r.code, r.errs, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("check %s did not finish in 10s", filepath.Base(file))
		}
	}
}
