package serve

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestStoreLock: a second appliance on the same audit store wrote into it
// before failing at its DNS bind; its sequence numbers collided with the
// first one's, whose pipeline then retried forever and hung every logs
// call. The second one must stop before it opens the store, naming the
// holder; once the first is gone the store is free again.
func TestStoreLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db.lock")
	first, err := lockStore(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockStore(path)
	if !errors.Is(err, ErrStoreInUse) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second lock: %v, want ErrStoreInUse naming pid %d", err, os.Getpid())
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := lockStore(path)
	if err != nil {
		t.Fatalf("lock after the holder closed: %v", err)
	}
	again.Close()
}
