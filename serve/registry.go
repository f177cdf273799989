package serve

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"airlock/dnsd"
	"airlock/policies"
	"airlock/proxy"
)

// Registry maps each sandbox's address to the sandbox and its policy. It
// is how dnsd and the proxy learn who is asking: the source address, which
// the kernel path has already checked against the sandbox's veth. An
// unknown address is no sandbox (denied by both).
type Registry struct {
	mu     sync.RWMutex
	byAddr map[netip.Addr]*entry
	byID   map[string]*entry
	locks  *sandboxLocks                          // the sandboxes' own lockfiles (mu held)
	tenant atomic.Pointer[func(id string) string] // the principal of a sandbox, for the package cache's scopes
}

// SetLocks names the lockfiles each sandbox was created with: a sandbox
// registered (or whose lockfiles change) carries its own from then on.
// Remove forgets a sandbox's.
func (r *Registry) SetLocks(l *sandboxLocks) {
	l.onChange(r.relock)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.locks = l
	for id := range r.byID {
		r.relockLocked(id)
	}
}

// SetTenants names the principal each sandbox belongs to (its owner):
// a private registry's artifacts are cached for that principal alone.
// Unset, or "" for a sandbox: the sandbox alone.
func (r *Registry) SetTenants(f func(id string) string) { r.tenant.Store(&f) }

// entry is one registered sandbox; it is never changed once registered
// (relock replaces it), so readers use it without the lock.
type entry struct {
	id     string
	addr   netip.Addr
	policy *policyRef
	lock   *policies.LockSet // the lockfiles it was created with, nil when none
	noNet  bool              // its kept lockfiles do not read: it is refused (fail closed)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{byAddr: map[netip.Addr]*entry{}, byID: map[string]*entry{}}
}

// Add registers a sandbox at addr under policy; a previous registration
// of the same id or address is replaced.
func (r *Registry) Add(id string, addr netip.Addr, policy *policyRef) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removeLocked(id)
	if old, ok := r.byAddr[addr]; ok {
		delete(r.byID, old.id)
	}
	e := &entry{id: id, addr: addr.Unmap(), policy: policy}
	e.lock, e.noNet = r.lockOf(id)
	r.byAddr[e.addr] = e
	r.byID[id] = e
}

// lockOf is the sandbox's lockfiles (r.mu held); noNet is set when its
// kept lockfiles do not read.
func (r *Registry) lockOf(id string) (lock *policies.LockSet, noNet bool) {
	lock, ok := r.locks.lookup(id)
	return lock, !ok
}

// relock gives a registered sandbox the lockfiles it has now.
func (r *Registry) relock(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.relockLocked(id)
}

func (r *Registry) relockLocked(id string) {
	e, ok := r.byID[id]
	if !ok {
		return
	}
	n := *e
	n.lock, n.noNet = r.lockOf(id)
	r.byID[id] = &n
	if r.byAddr[e.addr] == e {
		r.byAddr[e.addr] = &n
	}
}

// Remove forgets a sandbox.
func (r *Registry) Remove(id string) {
	r.mu.Lock()
	r.removeLocked(id)
	l := r.locks
	r.mu.Unlock()
	l.forget(id)
}

func (r *Registry) removeLocked(id string) {
	if e, ok := r.byID[id]; ok {
		delete(r.byID, id)
		if r.byAddr[e.addr] == e {
			delete(r.byAddr, e.addr)
		}
	}
}

func (r *Registry) lookup(a netip.Addr) (*entry, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.byAddr[a.Unmap()]
	return e, ok
}

// Len is the number of registered sandboxes.
func (r *Registry) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.byID)
}

// ProxyIdentifier is the registry as the proxy's Identifier. The policy
// it hands out follows reloads: each decision uses the current version.
// A sandbox whose kept lockfiles do not read is not identified: no
// network (fail closed).
func (r *Registry) ProxyIdentifier() proxy.Identifier {
	return proxy.IdentifierFunc(func(a netip.Addr) (proxy.Sandbox, bool) {
		e, ok := r.lookup(a)
		if !ok || e.noNet {
			return proxy.Sandbox{}, false
		}
		sb := proxy.Sandbox{ID: e.id, Policy: e.policy, Lock: e.lock}
		if f := r.tenant.Load(); f != nil {
			sb.Tenant = (*f)(e.id)
		}
		return sb, true
	})
}

// DNSIdentifier is the registry as dnsd's Identifier. It hands out the
// current policy version (a pointer per version, part of dnsd's cache key).
func (r *Registry) DNSIdentifier() dnsd.Identifier {
	return dnsd.IdentifierFunc(func(a netip.Addr) (dnsd.Sandbox, bool) {
		e, ok := r.lookup(a)
		if !ok || e.noNet { // no network, its DNS included
			return dnsd.Sandbox{}, false
		}
		return dnsd.Sandbox{ID: e.id, Policy: e.policy.load()}, true
	})
}
