// Package safefile reads the appliance's own files — policies, config,
// secrets, tokens, CA material — without letting a file that is not a
// plain file hang or exhaust the process. A file is opened non-blocking
// (a FIFO cannot wedge the open), fstat'ed, and refused unless it is a
// regular file; what is read is capped. ReadIn also refuses a symbolic
// link that leaves the directory it is read from. WriteAtomic writes
// the appliance's state files so that a reader never sees half of one.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrNotRegular is wrapped by the error for a path that is not a regular
// file (a FIFO, a device, a socket, a directory).
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by the error for a file above its cap.
var ErrTooLarge = errors.New("file is too large")

// ErrOutsideDir is wrapped by the error for a name in ReadIn that is, or
// resolves through a symbolic link to, a file outside the directory.
var ErrOutsideDir = errors.New("path leaves its directory")

// ErrPermissions is wrapped by ReadPrivate's error for a file that group
// or others may read or write.
var ErrPermissions = errors.New("file is accessible to group or others")

// ErrOwner is wrapped by ReadPrivate's error for a file that belongs to
// another user than root or the appliance's own (its effective uid).
var ErrOwner = errors.New("file is owned by another user")

const openFlags = os.O_RDONLY | syscall.O_NONBLOCK | syscall.O_NOCTTY | syscall.O_CLOEXEC

// Read reads the regular file at path, at most limit bytes. A symbolic
// link is followed (an operator may link their config), but what it
// names must be a regular file.
func Read(path string, limit int64) ([]byte, error) {
	if err := regularBeforeOpen(path)(os.Stat(path)); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, openFlags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readChecked(f, path, limit, false)
}

// ReadPrivate is Read for a file that holds secrets: it also refuses a
// file whose mode gives group or others any access, and one that belongs
// to another user than root or the appliance's own (its effective uid):
// that user could change the secrets, or read them through a mode it sets.
func ReadPrivate(path string, limit int64) ([]byte, error) {
	if err := regularBeforeOpen(path)(os.Stat(path)); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, openFlags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readChecked(f, path, limit, true)
}

// ReadIn reads the regular file name inside dir, at most limit bytes.
// Symbolic links are resolved inside dir; one that leads out of it (or a
// name with "..") is refused with ErrOutsideDir.
func ReadIn(dir, name string, limit int64) ([]byte, error) {
	path := filepath.Join(dir, name)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if err = regularBeforeOpen(path)(root.Stat(name)); err != nil {
		return nil, outsideDir(err, path, dir)
	}
	f, err := root.OpenFile(name, openFlags, 0)
	if err != nil {
		return nil, outsideDir(err, path, dir)
	}
	defer f.Close()
	return readChecked(f, path, limit, false)
}

// outsideDir names an os.Root escape as ErrOutsideDir; other errors pass.
func outsideDir(err error, path, dir string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Err.Error() == "path escapes from parent" {
		return fmt.Errorf("%s: %w %s (a symbolic link or \"..\" out of it is refused)", path, ErrOutsideDir, dir)
	}
	return err
}

// regularBeforeOpen refuses, before it is opened, a file that is not a
// regular one: opening a special file can act on it (a FIFO's waiting
// writer wakes, a device may arm). readChecked checks again on the open
// descriptor, so a swap in between is still refused.
func regularBeforeOpen(path string) func(fs.FileInfo, error) error {
	return func(st fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%s: %w: it is %s; only regular files are read", path, ErrNotRegular, Describe(st.Mode()))
		}
		return nil
	}
}

func readChecked(f *os.File, path string, limit int64, private bool) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w: it is %s; only regular files are read", path, ErrNotRegular, Describe(st.Mode()))
	}
	if private {
		if err := privateChecks(st, path); err != nil {
			return nil, err
		}
	}
	if st.Size() > limit {
		return nil, tooLarge(path, limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, tooLarge(path, limit)
	}
	return b, nil
}

// privateChecks refuses a file that holds secrets whose owner or mode
// lets someone but root and the appliance's user at it.
func privateChecks(st fs.FileInfo, path string) error {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		if euid := uint32(os.Geteuid()); sys.Uid != 0 && sys.Uid != euid {
			return fmt.Errorf("%s: %w: uid %d owns it, but a file that holds secrets must belong to root or to the appliance's user (uid %d): run `chown %d %s`",
				path, ErrOwner, sys.Uid, euid, euid, path)
		}
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s: %w: mode %04o, it holds secrets: run `chmod 600 %s`",
			path, ErrPermissions, st.Mode().Perm(), path)
	}
	return nil
}

func tooLarge(path string, limit int64) error {
	return fmt.Errorf("%s: %w: above the %s cap", path, ErrTooLarge, Size(limit))
}

// Size writes a cap for an error message: 1 MiB, 64 KiB, 100 bytes.
func Size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Describe names a file mode's type for an error: "a named pipe (FIFO)".
func Describe(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "an irregular file (" + m.Type().String() + ")"
}

// WriteAtomic writes b to path through a new temporary file in the same
// directory (created with O_EXCL, so nothing else's file is reused),
// given mode and renamed into place: a reader sees the old file or the
// whole new one, never a part. Nothing is fsynced (it is on the claim
// path), so that holds for readers, not across a power loss, after which
// the file may be empty.
func WriteAtomic(path string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// OpenRegular opens path for writing (flag adds to O_WRONLY, e.g.
// O_CREATE|O_APPEND) without following a symbolic link at it and without
// blocking on a FIFO, and refuses anything but a regular file. It returns
// the file and its stat.
func OpenRegular(path string, flag int, mode os.FileMode) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, mode)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s: %w: it is %s", path, ErrNotRegular, Describe(st.Mode()))
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}
