package serve

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// storeLock is an exclusive lock on the audit store, held for the
// appliance's life: two appliances writing one store collide on sequence
// numbers, and the loser's pipeline retries forever (a flush, and with it
// every logs call, then hangs). The second one now stops at start instead,
// naming the first one's PID. The kernel drops the lock when the holder
// dies, kill -9 included.
type storeLock struct{ f *os.File }

// ErrStoreInUse is returned when another process holds the store's lock.
var ErrStoreInUse = errors.New("the audit store is in use by another airlock serve")

// lockStore takes path's lock (path is the store's file plus ".lock").
func lockStore(path string) (*storeLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			b := make([]byte, 32)
			n, _ := f.ReadAt(b, 0)
			holder := strings.TrimSpace(string(b[:n]))
			if _, perr := strconv.Atoi(holder); perr != nil || holder == "" {
				holder = "unknown"
			}
			return nil, fmt.Errorf("%w (pid %s holds %s): run one appliance per store, or give this one its own state_dir or audit.store", ErrStoreInUse, holder, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &storeLock{f: f}, nil
}

// Close releases the lock.
func (l *storeLock) Close() error { return l.f.Close() }
