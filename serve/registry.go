package serve

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"airlock/dnsd"
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
	tenant atomic.Pointer[func(id string) string] // the principal of a sandbox, for the package cache's scopes
	locks  atomic.Pointer[sandboxLocks]           // the sandboxes' own lockfiles
}

// SetLocks names the lockfiles each sandbox was created with; Remove
// forgets a sandbox's.
func (r *Registry) SetLocks(l *sandboxLocks) { r.locks.Store(l) }

// SetTenants names the principal each sandbox belongs to (its owner):
// a private registry's artifacts are cached for that principal alone.
// Unset, or "" for a sandbox: the sandbox alone.
func (r *Registry) SetTenants(f func(id string) string) { r.tenant.Store(&f) }

type entry struct {
	id     string
	addr   netip.Addr
	policy *policyRef
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
	r.byAddr[e.addr] = e
	r.byID[id] = e
}

// Remove forgets a sandbox.
func (r *Registry) Remove(id string) {
	r.mu.Lock()
	r.removeLocked(id)
	r.mu.Unlock()
	r.locks.Load().forget(id)
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
func (r *Registry) ProxyIdentifier() proxy.Identifier {
	return proxy.IdentifierFunc(func(a netip.Addr) (proxy.Sandbox, bool) {
		e, ok := r.lookup(a)
		if !ok {
			return proxy.Sandbox{}, false
		}
		sb := proxy.Sandbox{ID: e.id, Policy: e.policy}
		if f := r.tenant.Load(); f != nil {
			sb.Tenant = (*f)(e.id)
		}
		if l := r.locks.Load(); l != nil {
			if sb.Lock, ok = l.lookup(e.id); !ok {
				return proxy.Sandbox{}, false // its lockfiles do not read: fail closed
			}
		}
		return sb, true
	})
}

// DNSIdentifier is the registry as dnsd's Identifier. It hands out the
// current policy version (a pointer per version, part of dnsd's cache key).
func (r *Registry) DNSIdentifier() dnsd.Identifier {
	return dnsd.IdentifierFunc(func(a netip.Addr) (dnsd.Sandbox, bool) {
		e, ok := r.lookup(a)
		if !ok {
			return dnsd.Sandbox{}, false
		}
		return dnsd.Sandbox{ID: e.id, Policy: e.policy.load()}, true
	})
}
