package dnsd

import (
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Bindings is the ledger of addresses each sandbox learned from dnsd:
// (sandbox, name, address, expiry). The proxy reads it to attribute and
// decide connections by address; the flow log joins on it. It holds at most
// its size bound (the oldest binding goes first) and entries expire a grace
// period after their TTL. Safe for concurrent use.
type Bindings struct {
	mu    sync.Mutex
	max   int
	grace time.Duration
	byKey map[bindKey]map[string]time.Time // (sandbox, addr) -> name -> expiry
	n     int
	fifo  []bindRef // insertion order ring, len == max
	head  int       // next slot to overwrite

	// removed counts bindings dropped (evicted or expired); a cache hit
	// that bound the same addresses under the same count knows they are
	// still there.
	removed atomic.Uint64
}

type bindKey struct {
	sandbox string
	addr    netip.Addr
}

type bindRef struct {
	key  bindKey
	name string
}

// Binding is one ledger entry.
type Binding struct {
	Sandbox string
	Name    string // without the trailing dot
	Addr    netip.Addr
	Expires time.Time
}

// NewBindings returns a ledger holding at most size entries, each kept for
// its record's TTL plus grace.
func NewBindings(size int, grace time.Duration) *Bindings {
	size = max(size, 1)
	return &Bindings{max: size, grace: grace, byKey: make(map[bindKey]map[string]time.Time), fifo: make([]bindRef, size)}
}

// Add records that sandbox learned name -> addr, valid until expires.
func (b *Bindings) Add(sandbox, name string, addr netip.Addr, expires time.Time) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	k := bindKey{sandbox, addr.Unmap()}
	b.mu.Lock()
	defer b.mu.Unlock()
	names := b.byKey[k]
	if names == nil {
		names = make(map[string]time.Time, 1)
		b.byKey[k] = names
	}
	if old, ok := names[name]; ok {
		if expires.After(old) {
			names[name] = expires
		}
		return
	}
	b.evictSlot()
	names[name] = expires
	b.fifo[b.head] = bindRef{k, name}
	b.head = (b.head + 1) % b.max
	b.n++
}

// evictSlot frees the ring slot at head if it still holds a binding.
func (b *Bindings) evictSlot() {
	ref := b.fifo[b.head]
	if ref.name == "" {
		return
	}
	if names := b.byKey[ref.key]; names != nil {
		if _, ok := names[ref.name]; ok {
			delete(names, ref.name)
			b.n--
			b.removed.Add(1)
		}
		if len(names) == 0 {
			delete(b.byKey, ref.key)
		}
	}
	b.fifo[b.head] = bindRef{}
}

// NamesFor returns the names sandbox resolved to addr that have not expired.
func (b *Bindings) NamesFor(sandboxID string, addr netip.Addr) []string {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for name, exp := range b.byKey[bindKey{sandboxID, addr.Unmap()}] {
		if now.Before(exp) {
			out = append(out, name)
		}
	}
	return out
}

// Has reports whether sandbox learned addr for name and the binding is live.
func (b *Bindings) Has(sandboxID, name string, addr netip.Addr) bool {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	b.mu.Lock()
	defer b.mu.Unlock()
	exp, ok := b.byKey[bindKey{sandboxID, addr.Unmap()}][name]
	return ok && time.Now().Before(exp)
}

// All returns every live binding (for inspection and tests).
func (b *Bindings) All() []Binding {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Binding
	for k, names := range b.byKey {
		for name, exp := range names {
			if now.Before(exp) {
				out = append(out, Binding{Sandbox: k.sandbox, Name: name, Addr: k.addr, Expires: exp})
			}
		}
	}
	return out
}

// Len is the number of entries held, expired ones not yet swept included.
func (b *Bindings) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

// sweepChunk is how many bindings Sweep looks at before it lets others
// take the lock: a ledger of 200,000 bindings swept in one go would hold up
// every query that records a binding for tens of milliseconds.
const sweepChunk = 512

// Sweep removes expired entries, a chunk at a time. Bindings added or
// removed while it yields may be visited or not: the next sweep gets them.
func (b *Bindings) Sweep(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	seen := 0
	yield := func() {
		if seen++; seen%sweepChunk == 0 {
			b.mu.Unlock()
			runtime.Gosched()
			b.mu.Lock()
		}
	}
	for k := range b.byKey {
		yield()
		names := b.byKey[k]
		for name, exp := range names {
			yield() // names may be emptied meanwhile; deleting from it is then a no-op
			if _, ok := names[name]; ok && !now.Before(exp) {
				delete(names, name)
				b.n--
				b.removed.Add(1)
			}
		}
		if len(b.byKey[k]) == 0 {
			delete(b.byKey, k)
		}
	}
}

// record adds the address records of an answer.
// Both the name asked and the record's owner (the end of a CNAME chain) are
// bound.
func (b *Bindings) record(sandbox, qname string, rrs []dns.RR, now time.Time) {
	b.each(sandbox, qname, rrs, func(h *dns.RR_Header) time.Time {
		return now.Add(time.Duration(h.Ttl)*time.Second + b.grace)
	})
}

// bindMark remembers that a cached answer's addresses were bound for a
// sandbox until a time, while the ledger had dropped a given number of
// bindings.
type bindMark struct {
	sandbox string
	until   time.Time
	removed uint64
}

// recordHit binds a cached entry's addresses for sandbox until until (plus
// grace), unless this sandbox bound them less than a second short of that
// and the ledger dropped nothing since: every cache hit would otherwise
// take the ledger's lock to write what it already holds.
func (b *Bindings) recordHit(e *entry, sandbox, qname string, until time.Time) {
	removed := b.removed.Load()
	if m := e.bound.Load(); m != nil && m.sandbox == sandbox && m.removed == removed && !m.until.Before(until.Add(-time.Second)) {
		return
	}
	exp := until.Add(b.grace)
	for _, a := range e.addrs {
		b.Add(sandbox, qname, a.addr, exp)
		if !strings.EqualFold(a.owner, qname) {
			b.Add(sandbox, a.owner, a.addr, exp)
		}
	}
	e.bound.Store(&bindMark{sandbox: sandbox, until: until, removed: removed})
}

func (b *Bindings) each(sandbox, qname string, rrs []dns.RR, expiry func(*dns.RR_Header) time.Time) {
	for _, rr := range rrs {
		var a netip.Addr
		switch rr := rr.(type) {
		case *dns.A:
			a, _ = netip.AddrFromSlice(rr.A)
		case *dns.AAAA:
			a, _ = netip.AddrFromSlice(rr.AAAA)
		default:
			continue
		}
		h := rr.Header()
		exp := expiry(h)
		b.Add(sandbox, qname, a, exp)
		if !strings.EqualFold(h.Name, qname) {
			b.Add(sandbox, h.Name, a, exp)
		}
	}
}
