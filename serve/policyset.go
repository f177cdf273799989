package serve

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"airlock/audit"
	"airlock/client"
	"airlock/policies"
)

// policyRef is a named policy whose current version a reload swaps
// atomically. Sandboxes hold the ref, so every decision — including each
// request inside a tunnel that was open before the reload — uses the
// current version.
type policyRef struct {
	name string
	cur  atomic.Pointer[policies.Bound]
}

// load is the current version, bound to the operator's settings: a
// pointer per version, so dnsd's cache (keyed by the policy value) never
// serves one version's answer to another.
func (r *policyRef) load() *policies.Bound { return r.cur.Load() }

// Decide decides under the current version (proxy.Decider).
func (r *policyRef) Decide(req policies.Request) policies.Verdict { return r.load().Decide(req) }

// Reach asks the current version (proxy.Decider).
func (r *policyRef) Reach(a netip.Addr, v policies.Verdict) policies.AddrDecision {
	return r.load().Reach(a, v)
}

// policySet is the policies of the policy directory, by name (the file
// name without .toml). Reload validates every file before any replaces
// the running version.
type policySet struct {
	dir  string
	op   policies.Operator // bound to every version: upstream.allow, own addresses
	emit audit.Emitter

	mu   sync.Mutex // serializes reloads; readers use byName under rmu
	rmu  sync.RWMutex
	refs map[string]*policyRef
}

// newPolicySet loads every policy in dir. Any file with errors fails the
// start (there is no running version to keep): the error lists them all.
func newPolicySet(dir string, op policies.Operator, emit audit.Emitter) (*policySet, error) {
	s := &policySet{dir: dir, op: op, emit: emit, refs: map[string]*policyRef{}}
	files, err := policyFiles(dir)
	if err != nil {
		return nil, err
	}
	var errs []error
	for name, file := range files {
		p, err := policies.Load(file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ref := &policyRef{name: name}
		ref.cur.Store(policies.Bind(p, op))
		s.refs[name] = ref
		s.event("loaded", name, "", p.Hash(), nil)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("policies in %s:\n%w", dir, errors.Join(errs...))
	}
	return s, nil
}

func policyFiles(dir string) (map[string]string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "*.toml"))
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("policy directory: %w", err)
	}
	out := make(map[string]string, len(matches))
	for _, m := range matches {
		out[strings.TrimSuffix(filepath.Base(m), ".toml")] = m
	}
	return out, nil
}

func (s *policySet) event(action, name, oldHash, newHash string, errs []string) {
	e := audit.New(audit.KindPolicy, "")
	e.Policy = &audit.Policy{Action: action, Name: name, OldHash: oldHash, NewHash: newHash, Errors: errs}
	if action == "rejected" {
		e.Verdict = "deny"
		e.Reason = "policy file has errors; the running version stays"
	}
	s.emit.Emit(e)
}

// Get returns the named policy.
func (s *policySet) Get(name string) (*policyRef, bool) {
	s.rmu.RLock()
	defer s.rmu.RUnlock()
	r, ok := s.refs[name]
	return r, ok
}

// List describes the loaded policies, by name.
func (s *policySet) List() []client.PolicyInfo {
	s.rmu.RLock()
	defer s.rmu.RUnlock()
	out := make([]client.PolicyInfo, 0, len(s.refs))
	for name, r := range s.refs {
		p := r.load()
		out = append(out, client.PolicyInfo{Name: name, File: p.File(), Hash: p.Hash()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Reload re-reads the directory. A file with errors is rejected and its
// running version stays; a changed valid file replaces its version
// atomically; a new file is added. Each outcome is a policy event naming
// who asked (by). A removed file stays loaded for the sandboxes using it
// but can no longer be chosen for new ones.
func (s *policySet) Reload(by string) (client.ReloadResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	files, err := policyFiles(s.dir)
	if err != nil {
		return client.ReloadResult{}, err
	}
	var res client.ReloadResult
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		s.reloadOne(name, files[name], by, &res)
	}
	s.rmu.Lock()
	for name := range s.refs {
		if _, ok := files[name]; !ok {
			delete(s.refs, name)
			s.event("removed", name, "", "", []string{"file removed; sandboxes using it keep its last version"})
		}
	}
	s.rmu.Unlock()
	return res, nil
}

func (s *policySet) reloadOne(name, file, by string, res *client.ReloadResult) {
	ref, known := s.Get(name)
	oldHash := ""
	if known {
		oldHash = ref.load().Hash()
	}
	p, err := policies.Load(file)
	if err != nil {
		msgs := strings.Split(err.Error(), "\n")
		res.Rejected = append(res.Rejected, client.PolicyChange{Name: name, OldHash: oldHash, Errors: msgs})
		s.event("rejected", name, oldHash, "", append(msgs, "requested by "+by))
		return
	}
	if known && p.Hash() == oldHash {
		res.Unchanged = append(res.Unchanged, name)
		return
	}
	bp := policies.Bind(p, s.op)
	if known {
		ref.cur.Store(bp)
	} else {
		ref = &policyRef{name: name}
		ref.cur.Store(bp)
		s.rmu.Lock()
		s.refs[name] = ref
		s.rmu.Unlock()
	}
	res.Reloaded = append(res.Reloaded, client.PolicyChange{Name: name, OldHash: oldHash, NewHash: p.Hash()})
	e := audit.New(audit.KindPolicy, "")
	e.Policy = &audit.Policy{Action: "reloaded", Name: name, OldHash: oldHash, NewHash: p.Hash()}
	e.Reason = "requested by " + by
	s.emit.Emit(e)
}
