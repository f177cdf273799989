package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// within fails the test if f does not return in time: the files these
// tests make used to hang a reader (a FIFO) or feed it forever (/dev/zero).
func within(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("read did not return within 5s")
		return nil
	}
}

func TestRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.toml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, want string }{
		{"fifo.toml", "a named pipe (FIFO)"},
		{"zero.toml", "a character device"},
		{".", "a directory"},
	} {
		p := filepath.Join(dir, c.name)
		for fn, read := range map[string]func() error{
			"Read":        func() error { _, err := Read(p, 1<<20); return err },
			"ReadPrivate": func() error { _, err := ReadPrivate(p, 1<<20); return err },
		} {
			err := within(t, read)
			if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("%s(%s): %v, want ErrNotRegular naming the path and %q", fn, c.name, err, c.want)
			}
		}
	}
	// ReadIn: /dev/zero is outside the directory, so it is refused before
	// its type is looked at; the FIFO is inside and refused by type.
	if err := within(t, func() error { _, err := ReadIn(dir, "fifo.toml", 1<<20); return err }); !errors.Is(err, ErrNotRegular) {
		t.Errorf("ReadIn(fifo): %v, want ErrNotRegular", err)
	}
	if err := within(t, func() error { _, err := ReadIn(dir, "zero.toml", 1<<20); return err }); !errors.Is(err, ErrOutsideDir) {
		t.Errorf("ReadIn(symlink to /dev/zero): %v, want ErrOutsideDir", err)
	}
}

func TestReadInSymlinks(t *testing.T) {
	outside, dir := t.TempDir(), t.TempDir()
	write(t, filepath.Join(outside, "secret.toml"), "x", 0o600)
	write(t, filepath.Join(dir, "real.toml"), "version = 1\n", 0o600)
	if err := os.Symlink(filepath.Join(outside, "secret.toml"), filepath.Join(dir, "abs.toml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../"+filepath.Base(outside)+"/secret.toml", filepath.Join(dir, "rel.toml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real.toml", filepath.Join(dir, "inside.toml")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"abs.toml", "rel.toml", "../" + filepath.Base(outside) + "/secret.toml"} {
		if _, err := ReadIn(dir, n, 1<<20); !errors.Is(err, ErrOutsideDir) || !strings.Contains(err.Error(), dir) {
			t.Errorf("ReadIn(%s): %v, want ErrOutsideDir naming the directory", n, err)
		}
	}
	b, err := ReadIn(dir, "inside.toml", 1<<20)
	if err != nil || string(b) != "version = 1\n" {
		t.Errorf("ReadIn(symlink inside the directory) = %q, %v", b, err)
	}
}

func TestSizeCap(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "big")
	write(t, p, strings.Repeat("a", 1025), 0o600)
	for fn, read := range map[string]func() ([]byte, error){
		"Read":        func() ([]byte, error) { return Read(p, 1024) },
		"ReadPrivate": func() ([]byte, error) { return ReadPrivate(p, 1024) },
		"ReadIn":      func() ([]byte, error) { return ReadIn(dir, "big", 1024) },
	} {
		if _, err := read(); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "1 KiB") {
			t.Errorf("%s: %v, want ErrTooLarge naming the 1 KiB cap", fn, err)
		}
	}
	if b, err := Read(p, 1025); err != nil || len(b) != 1025 {
		t.Errorf("Read at the cap: %d bytes, %v", len(b), err)
	}
}

func TestReadPrivateModes(t *testing.T) {
	p := filepath.Join(t.TempDir(), "token")
	write(t, p, "s", 0o600)
	if _, err := ReadPrivate(p, 10); err != nil {
		t.Fatalf("0600: %v", err)
	}
	for _, m := range []os.FileMode{0o640, 0o604, 0o620, 0o602} {
		if err := os.Chmod(p, m); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadPrivate(p, 10); !errors.Is(err, ErrPermissions) || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("mode %04o: %v, want ErrPermissions", m, err)
		}
	}
}

// TestReadPrivateOwner: a private file that belongs to another user than
// root or the appliance's own is refused, naming the owner; one the
// process's user owns is read.
func TestReadPrivateOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: giving a file to another user needs root")
	}
	p := filepath.Join(t.TempDir(), "secrets")
	write(t, p, "s", 0o600)
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := ReadPrivate(p, 10)
	if !errors.Is(err, ErrOwner) || !strings.Contains(err.Error(), "uid 65534 owns it") || !strings.Contains(err.Error(), p) {
		t.Fatalf("owned by 65534: %v, want ErrOwner naming the owner and the path", err)
	}
	if _, err := Read(p, 10); err != nil {
		t.Fatalf("Read (not private) refused it: %v", err)
	}
	if err := os.Chown(p, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPrivate(p, 10); err != nil {
		t.Fatalf("owned by root: %v", err)
	}
}

func write(t *testing.T, p, s string, m os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), m); err != nil {
		t.Fatal(err)
	}
}

// Opening a special file can act on it (a FIFO's blocked writer wakes, a
// watchdog device arms): one that is not a regular file is refused before
// it is opened. A writer waiting on a FIFO must still be waiting after
// each reader refused it.
func TestSpecialFileNotOpened(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	opened := make(chan struct{})
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0) // blocks until a reader opens
		if err == nil {
			f.Close()
		}
		close(opened)
	}()
	defer func() { // release the writer however the test ends
		if f, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			<-opened
			f.Close()
		}
	}()
	time.Sleep(50 * time.Millisecond) // let the writer block in open
	for name, read := range map[string]func() error{
		"Read":        func() error { _, err := Read(fifo, 10); return err },
		"ReadPrivate": func() error { _, err := ReadPrivate(fifo, 10); return err },
		"ReadIn":      func() error { _, err := ReadIn(dir, "fifo", 10); return err },
	} {
		if err := within(t, read); !errors.Is(err, ErrNotRegular) {
			t.Errorf("%s: %v, want ErrNotRegular", name, err)
		}
		select {
		case <-opened:
			t.Fatalf("%s opened the FIFO (its writer woke) before refusing it", name)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestWriteAtomic: the file is replaced whole with the mode asked, and no
// temporary file is left beside it.
func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	for _, body := range []string{"first", "second, longer"} {
		if err := WriteAtomic(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		st, _ := os.Stat(p)
		if err != nil || string(b) != body || st.Mode().Perm() != 0o600 {
			t.Fatalf("after writing %q: %q %v (mode %v)", body, b, err, st.Mode())
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".tmp-*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
	if err := WriteAtomic(filepath.Join(dir, "missing", "x"), nil, 0o600); err == nil {
		t.Error("a write into a missing directory succeeded")
	}
}
