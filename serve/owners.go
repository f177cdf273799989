package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"airlock/internal/safefile"
)

// ownersFile is where the appliance keeps which principal created each
// sandbox (STATE_DIR/owners.json), so that ownership, and with it who may
// read a gone sandbox's events and report, survives a restart.
const ownersFile = "owners.json"

// maxOwners bounds the records kept; the oldest go first (an admin still
// sees everything).
const maxOwners = 100000

// Owners maps sandbox ids to the principal that created them. A sandbox
// without a record (created before principals existed, or adopted) is
// the admins' only.
type Owners struct {
	file string // "" = memory only

	mu sync.Mutex
	m  map[string]owner
}

type owner struct {
	Principal string    `json:"principal"`
	Created   time.Time `json:"created"`
}

// newOwners loads the records in file ("" = keep them in memory only).
// A missing file is an empty record.
func newOwners(file string) (*Owners, error) {
	o := &Owners{file: file, m: map[string]owner{}}
	if file == "" {
		return o, nil
	}
	b, err := safefile.ReadPrivate(file, 64<<20)
	if errors.Is(err, os.ErrNotExist) {
		return o, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox owners: %w", err)
	}
	if err := json.Unmarshal(b, &o.m); err != nil {
		return nil, fmt.Errorf("sandbox owners %s: %w (move it aside to start over: admins still see every sandbox)", file, err)
	}
	return o, nil
}

// Owner returns the principal that created sandbox id.
func (o *Owners) Owner(id string) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.m[id]
	return e.Principal, ok
}

// Set records that principal created sandbox id, and writes the record.
func (o *Owners) Set(id, principal string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m[id] = owner{Principal: principal, Created: time.Now().UTC()}
	o.prune()
	return o.save()
}

func (o *Owners) prune() {
	if len(o.m) <= maxOwners {
		return
	}
	ids := make([]string, 0, len(o.m))
	for id := range o.m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return o.m[ids[i]].Created.Before(o.m[ids[j]].Created) })
	for _, id := range ids[:len(ids)-maxOwners] {
		delete(o.m, id)
	}
}

// save writes the records atomically (a temporary file renamed), 0600.
func (o *Owners) save() error {
	if o.file == "" {
		return nil
	}
	b, err := json.Marshal(o.m)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(o.file), ".owners-*")
	if err != nil {
		return fmt.Errorf("sandbox owners: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("sandbox owners: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("sandbox owners: %w", err)
	}
	if err := os.Rename(tmp.Name(), o.file); err != nil {
		return fmt.Errorf("sandbox owners: %w", err)
	}
	return nil
}
