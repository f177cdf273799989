package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"airlock/client"
	"airlock/internal/safefile"
	"airlock/policies"
)

// PackagesConfig is the [packages] section: OSV lists directories of OSV
// advisories (the MAL- records of a malicious-packages data set), read
// recursively (*.json) at start and on every reload.
type PackagesConfig struct {
	OSV   []string           `toml:"osv"`
	Cache PackageCacheConfig `toml:"cache"`
}

// advisories is the loaded denylist, swapped whole on reload; the proxy
// reads the current one on each request.
type advisories struct {
	dirs []string
	cur  atomic.Pointer[policies.Advisories]
	log  *slog.Logger
}

var _ interface{ Advisories() *policies.Advisories } = (*advisories)(nil)

// Advisories returns the current list (nil when none is configured).
func (a *advisories) Advisories() *policies.Advisories { return a.cur.Load() }

// load reads the directories. A list that does not load never replaces
// the running one (as a broken policy does not): the error is returned
// and the old list stays.
func (a *advisories) load() error {
	if len(a.dirs) == 0 {
		return nil
	}
	adv, err := policies.LoadOSV(a.dirs)
	if err != nil {
		return fmt.Errorf("packages.osv: %w", err)
	}
	a.cur.Store(adv)
	a.log.Info("malicious-package advisories loaded", "files", adv.Files(), "entries", adv.Len())
	return nil
}

// reloadAdvisories re-reads [packages] osv with the policies; a list
// that does not load is reported as rejected and the running one stays.
func (a *Appliance) reloadAdvisories(res *client.ReloadResult) {
	if a.advisory == nil || len(a.advisory.dirs) == 0 {
		return
	}
	if err := a.advisory.load(); err != nil {
		a.log.Error("malicious-package advisories rejected; the running list stays", "err", err)
		res.Rejected = append(res.Rejected, client.PolicyChange{Name: "packages.osv", Errors: strings.Split(err.Error(), "\n")})
	}
}

// Lockfiles given at sandbox creation (CreateRequest.Lockfiles) restrict
// the sandbox's package installs in every registries category: the
// proxy learns them with the sandbox's identity (Registry.SetLocks). They
// are kept in STATE_DIR/lockfiles/ID.json while the sandbox lives, so an
// appliance that adopts it after a restart restricts it still; a kept
// set that no longer reads leaves the sandbox with no network (fail
// closed).

// sandboxLockRule names the denials of a sandbox's lockfiles.
const sandboxLockRule = "sandbox.lockfiles"

// sandboxLock is a sandbox's lockfiles: as given, and read.
type sandboxLock struct {
	files []client.Lockfile
	set   *policies.LockSet
}

// parseLockfiles reads a create request's lockfiles (nil when none).
func parseLockfiles(files []client.Lockfile) (*sandboxLock, error) {
	if len(files) == 0 {
		return nil, nil
	}
	in := make([]policies.Lockfile, len(files))
	for i, f := range files {
		in[i] = policies.Lockfile{Name: f.Name, Data: []byte(f.Content)}
	}
	set, err := policies.ParseLockfiles(in, policies.Rule{Name: sandboxLockRule})
	if err != nil {
		return nil, client.Errorf(client.CodeInvalid, "lockfiles: %v", err)
	}
	return &sandboxLock{files: files, set: set}, nil
}

// sandboxLocks are the live sandboxes' lockfiles.
type sandboxLocks struct {
	dir     string
	log     *slog.Logger
	mu      sync.RWMutex
	m       map[string]*sandboxLock // nil value: kept lockfiles that do not read
	changed func(id string)         // told of every change (the registry's relock), nil when none
}

// onChange has f told of every change of a sandbox's lockfiles.
func (l *sandboxLocks) onChange(f func(id string)) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.changed = f
	l.mu.Unlock()
}

// notify tells the listener that id's lockfiles changed (l.mu not held).
func (l *sandboxLocks) notify(id string) {
	l.mu.RLock()
	f := l.changed
	l.mu.RUnlock()
	if f != nil {
		f(id)
	}
}

// openSandboxLocks reads the lockfiles kept for sandboxes a previous
// appliance left running.
func openSandboxLocks(dir string, log *slog.Logger) (*sandboxLocks, error) {
	l := &sandboxLocks{dir: dir, log: log, m: map[string]*sandboxLock{}}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lockfiles: %w", err)
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	for _, p := range names {
		id := strings.TrimSuffix(filepath.Base(p), ".json")
		var files []client.Lockfile
		b, err := safefile.ReadPrivate(p, maxSandboxLocks)
		if err == nil {
			err = json.Unmarshal(b, &files)
		}
		var lk *sandboxLock
		if err == nil {
			lk, err = parseLockfiles(files)
		}
		if err == nil && lk == nil {
			err = errors.New("no lockfiles")
		}
		if err != nil {
			log.Error("a sandbox's kept lockfiles do not read: it gets no network", "sandbox", id, "file", p, "err", err)
		}
		l.m[id] = lk
	}
	return l, nil
}

// maxSandboxLocks bounds a sandbox's kept lockfiles (the API body's bound).
const maxSandboxLocks = 16 << 20

// set gives id its lockfiles (none: nothing to do), kept on disk first.
func (l *sandboxLocks) set(id string, lk *sandboxLock) error {
	if l == nil || lk == nil {
		return nil
	}
	b, err := encodeLockfiles(lk.files)
	if err != nil {
		return err
	}
	if err := safefile.WriteAtomic(filepath.Join(l.dir, id+".json"), b, 0o600); err != nil {
		return fmt.Errorf("lockfiles: %w", err)
	}
	l.mu.Lock()
	l.m[id] = lk
	l.mu.Unlock()
	l.notify(id)
	return nil
}

// encodeLockfiles is the kept form of a sandbox's lockfiles: JSON that
// leaves <, > and & as they are (json.Marshal's \u003c would make a
// lockfile the API took up to six times longer), so the form is no
// longer than the request that gave it. Only U+2028, U+2029 and invalid
// UTF-8 (read as U+FFFD) grow; a form that grows past maxSandboxLocks is
// refused now, not left to cut the sandbox off at the next start.
func encodeLockfiles(files []client.Lockfile) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(files); err != nil {
		return nil, fmt.Errorf("lockfiles: %w", err)
	}
	if buf.Len() > maxSandboxLocks {
		return nil, client.Errorf(client.CodeInvalid, "lockfiles: %d bytes as kept (U+2028, U+2029 and invalid UTF-8 are written longer), above the %s bound",
			buf.Len(), safefile.Size(maxSandboxLocks))
	}
	return buf.Bytes(), nil
}

// lookup is the sandbox's lockfiles for the proxy; ok is false when its
// kept lockfiles do not read (the sandbox is then refused).
func (l *sandboxLocks) lookup(id string) (*policies.LockSet, bool) {
	if l == nil {
		return nil, true
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	lk, ok := l.m[id]
	if !ok {
		return nil, true
	}
	if lk == nil {
		return nil, false
	}
	return lk.set, true
}

// describe is what a sandbox's description says of its lockfiles: their
// names and entries, or a warning when its kept ones do not read.
func (l *sandboxLocks) describe(id string) (files []client.SandboxLockfile, warning string) {
	set, ok := l.lookup(id)
	if !ok {
		return nil, "its kept lockfiles do not read: it has no network (the appliance log says why)"
	}
	entries := set.Entries()
	for i, name := range set.Files() {
		files = append(files, client.SandboxLockfile{Name: name, Entries: entries[i]})
	}
	return files, ""
}

// move gives new the lockfiles of old (a warm member claimed keeps its
// own id).
func (l *sandboxLocks) move(old, new string) error {
	if l == nil {
		return nil
	}
	l.mu.RLock()
	lk, ok := l.m[old]
	l.mu.RUnlock()
	if !ok {
		return nil
	}
	l.forget(old)
	return l.set(new, lk)
}

// forget drops a sandbox's lockfiles.
func (l *sandboxLocks) forget(id string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	_, ok := l.m[id]
	delete(l.m, id)
	l.mu.Unlock()
	if ok {
		l.notify(id)
		if err := os.Remove(filepath.Join(l.dir, id+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
			l.log.Warn("lockfiles", "sandbox", id, "err", err)
		}
	}
}

// prune drops the lockfiles of sandboxes that are gone (removed while no
// appliance ran).
func (l *sandboxLocks) prune(live func(id string) bool) {
	if l == nil {
		return
	}
	l.mu.RLock()
	var gone []string
	for id := range l.m {
		if !live(id) {
			gone = append(gone, id)
		}
	}
	l.mu.RUnlock()
	for _, id := range gone {
		l.forget(id)
	}
}
