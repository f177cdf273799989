package serve

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"airlock/internal/safefile"
)

// TestAppliancesFilesAreRegular: the config, the secret store, the control
// token and upstream CA files are refused promptly, by name, when they are
// a FIFO (which hung the reader) or a link to /dev/zero (read until OOM).
func TestAppliancesFilesAreRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	readers := map[string]func(string) error{
		"config":   func(p string) error { _, err := Load(p); return err },
		"secrets":  func(p string) error { _, err := loadSecrets(p); return err },
		"token":    func(p string) error { _, err := ReadToken(p); return err },
		"ca_files": func(p string) error { _, err := readCAFiles([]string{p}); return err },
	}
	for name, read := range readers {
		for _, p := range []string{fifo, zero} {
			done := make(chan error, 1)
			go func() { done <- read(p) }()
			select {
			case err := <-done:
				// /dev/zero is mode 0666: the private files refuse that first.
				if !errors.Is(err, safefile.ErrNotRegular) && !(p == zero && errors.Is(err, safefile.ErrPermissions)) {
					t.Errorf("%s %s: %v, want ErrNotRegular", name, filepath.Base(p), err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s %s: the read did not return within 5s", name, filepath.Base(p))
			}
		}
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, MaxConfigFile+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, read := range readers {
		if err := read(big); !errors.Is(err, safefile.ErrTooLarge) && name != "ca_files" {
			t.Errorf("%s above its cap: %v, want ErrTooLarge", name, err)
		}
	}
}
