package serve

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// ErrStateDirUnsafe is wrapped by the error for a state directory that
// another user, or the group or everyone, can write: whoever can write it
// can replace the CA key or the audit store.
var ErrStateDirUnsafe = errors.New("state directory is writable by others")

// prepareStateDir creates dir 0700, or tightens an existing one to 0700
// (docs/config.md). It refuses one that is not a directory, is owned by
// another user, or that the group or others can write: its contents can
// no longer be trusted, and chmod would not undo what was planted.
func prepareStateDir(key, dir string) error {
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		// MkdirAll applies the umask; say the mode outright.
		return os.Chmod(dir, 0o700)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: %s is not a directory", key, dir)
	}
	if s, ok := st.Sys().(*syscall.Stat_t); ok && int(s.Uid) != os.Geteuid() {
		return fmt.Errorf("%s: %w: %s is owned by uid %d, not by the appliance (uid %d): "+
			"check what is in it, then `chown` it or choose another %s", key, ErrStateDirUnsafe, dir, s.Uid, os.Geteuid(), key)
	}
	if m := st.Mode().Perm(); m&0o022 != 0 {
		return fmt.Errorf("%s: %w: %s is mode %04o, so group or others could replace the CA key or the audit store: "+
			"check what is in it, then `chmod 700 %s`", key, ErrStateDirUnsafe, dir, m, dir)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("%s: tighten %s to 0700: %w", key, dir, err)
	}
	return nil
}
