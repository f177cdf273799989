package serve

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"airlock/audit"
	"airlock/internal/agentwire"
	"airlock/runner"
)

// attributor answers the proxy's and dnsd's attribution lookups: which
// process in a sandbox holds a connection's or query's socket, asked of
// the sandbox's agent off their paths. Answers are shared for a short
// while per socket (a query's A and AAAA, a retry), lookups in flight
// are bounded, and every lookup is answered within lookupBound.
type attributor struct {
	owners atomic.Pointer[sockOwners] // nil until the runner starts
	sem    chan struct{}

	mu    sync.Mutex
	cache map[sockKey]cached
}

// sockOwners is the runner's SockOwner (a test's fake in tests).
type sockOwners struct {
	lookup func(ctx context.Context, id string, q runner.SockQuery) (agentwire.SockOwner, error)
}

type sockKey struct {
	sandbox, proto string
	local, remote  netip.AddrPort
}

type cached struct {
	o       *audit.Owner
	expires time.Time
}

const (
	lookupBound   = 250 * time.Millisecond // an agent that has not answered by then: timeout
	cacheFor      = 2 * time.Second        // an answer is shared this long per socket
	maxInFlight   = 64                     // lookups at once, all sandboxes
	maxCacheItems = 8192
)

func newAttributor() *attributor {
	return &attributor{sem: make(chan struct{}, maxInFlight), cache: map[sockKey]cached{}}
}

func (t *attributor) setRunner(r *runner.Runner) {
	t.owners.Store(&sockOwners{lookup: r.SockOwner})
}

// Attribute starts (or shares) the lookup of one sandbox socket.
func (t *attributor) Attribute(sandboxID, proto string, local, remote netip.AddrPort) *audit.Owner {
	so := t.owners.Load()
	if so == nil {
		return audit.Answered(audit.Attribution{Status: audit.AttrNoAgent})
	}
	k := sockKey{sandboxID, proto, local, remote}
	now := time.Now()
	t.mu.Lock()
	if c, ok := t.cache[k]; ok && now.Before(c.expires) {
		t.mu.Unlock()
		return c.o
	}
	select {
	case t.sem <- struct{}{}:
	default:
		t.mu.Unlock()
		return audit.Answered(audit.Attribution{Status: audit.AttrBusy})
	}
	o := audit.NewOwner()
	t.store(k, cached{o: o, expires: now.Add(cacheFor)}, now)
	t.mu.Unlock()
	go t.lookup(so, o, sandboxID, runner.SockQuery{Proto: proto, Local: local, Remote: remote, At: now})
	return o
}

// store adds an entry, sweeping the expired ones when the cache is full.
func (t *attributor) store(k sockKey, c cached, now time.Time) {
	if len(t.cache) >= maxCacheItems {
		for k, c := range t.cache {
			if !now.Before(c.expires) {
				delete(t.cache, k)
			}
		}
		if len(t.cache) >= maxCacheItems {
			clear(t.cache)
		}
	}
	t.cache[k] = c
}

func (t *attributor) lookup(so *sockOwners, o *audit.Owner, id string, q runner.SockQuery) {
	defer func() { <-t.sem }()
	ctx, cancel := context.WithTimeout(context.Background(), lookupBound)
	defer cancel()
	res, err := so.lookup(ctx, id, q)
	o.Set(attribution(res, err, ctx.Err() != nil))
}

// attribution turns the agent's answer into an event's attribution.
func attribution(res agentwire.SockOwner, err error, timedOut bool) audit.Attribution {
	switch {
	case err == nil && res.Inferred:
		return audit.Attribution{ExecID: res.ExecID, Status: audit.AttrInferred}
	case err == nil && res.Pid == 0:
		return audit.Attribution{Status: audit.AttrOtherUID}
	case err == nil:
		return audit.Attribution{ExecID: res.ExecID, Pid: res.Pid, Comm: res.Comm, Status: audit.AttrSocket}
	case errors.Is(err, runner.ErrUnsupported):
		return audit.Attribution{Status: audit.AttrNoAgent}
	case errors.Is(err, runner.ErrNotFound):
		return audit.Attribution{Status: audit.AttrExited}
	case timedOut:
		return audit.Attribution{Status: audit.AttrTimeout}
	}
	return audit.Attribution{Status: audit.AttrError}
}
