package certs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"airlock/internal/safefile"
)

// TestOpenRefusesIrregularCAFiles: a FIFO in place of ca.crt, or ca.crt
// linked to /dev/zero, is refused promptly by name instead of hanging or
// filling memory.
func TestOpenRefusesIrregularCAFiles(t *testing.T) {
	for _, c := range []struct {
		name string
		make func(dir string) error
		want error
	}{
		{"fifo certificate", func(dir string) error { return syscall.Mkfifo(filepath.Join(dir, CertFile), 0o600) }, safefile.ErrNotRegular},
		{"certificate linked to /dev/zero", func(dir string) error { return os.Symlink("/dev/zero", filepath.Join(dir, CertFile)) }, safefile.ErrOutsideDir},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := Open(dir); err != nil {
				t.Fatal(err)
			}
			os.Remove(filepath.Join(dir, CertFile))
			if err := c.make(dir); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { _, err := Open(dir); done <- err }()
			select {
			case err := <-done:
				if !errors.Is(err, c.want) {
					t.Errorf("Open: %v, want %v", err, c.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Open did not return within 5s")
			}
		})
	}
}
