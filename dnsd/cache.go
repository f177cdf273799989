package dnsd

import (
	"hash/maphash"
	"net/netip"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/miekg/dns"
)

// cacheKey is everything that makes two answers differ: the policy that
// shaped them (rebinding guard, upstreams), whether the sandbox has IPv6,
// the name, the type, and the DNSSEC OK bit.
type cacheKey struct {
	policy Policy
	name   string
	qtype  uint16
	v6     bool
	do     bool
	edns   bool // the client sent OPT (the packed answer carries one)
}

// entry is one filtered answer, kept packed only (a parsed message per
// entry would double the cache's memory and the pointers the collector
// walks). Read-only once stored.
type entry struct {
	wire     []byte      // the answer packed
	rcode    int         // its rcode (for events)
	addrs    []entryAddr // its address records (for the bindings)
	ttls     []uint16    // offsets of the TTLs in wire
	qnameLen int         // wire length of the question name
	answers  []string    // for events
	strip    stripInfo
	upstream string
	stored   time.Time
	expires  time.Time
	bound    atomic.Pointer[bindMark] // the last sandbox whose bindings a hit recorded
}

// entryAddr is an address record of a cached answer.
type entryAddr struct {
	owner string // the record's name
	addr  netip.Addr
}

// cache is a bounded LRU of filtered answers with TTL-based expiry. It is
// split into shards by name, each an LRU with its own lock, so the UDP
// readers on different cores do not queue on one lock for every hit.
type cache struct {
	shards                 []*lru.Cache[cacheKey, *entry]
	seed                   maphash.Seed
	minTTL, maxTTL, negTTL time.Duration
}

// cacheShards is how many LRUs the cache is split into (when it holds at
// least that many entries per shard).
const cacheShards = 16

func newCache(size int, minTTL, maxTTL, negTTL time.Duration) *cache {
	if size < 0 {
		return nil
	}
	n := cacheShards
	if size < 64*n {
		n = 1 // small caches keep exact LRU order
	}
	c := &cache{seed: maphash.MakeSeed(), minTTL: minTTL, maxTTL: maxTTL, negTTL: negTTL}
	for i := range n {
		per := size / n
		if i < size%n {
			per++
		}
		l, err := lru.New[cacheKey, *entry](max(per, 1))
		if err != nil {
			return nil
		}
		c.shards = append(c.shards, l)
	}
	return c
}

// shard is the LRU that holds k.
func (c *cache) shard(k cacheKey) *lru.Cache[cacheKey, *entry] {
	if len(c.shards) == 1 {
		return c.shards[0]
	}
	return c.shards[(maphash.String(c.seed, k.name)+uint64(k.qtype))%uint64(len(c.shards))]
}

// get returns a copy of a live entry's answer with TTLs aged.
func (c *cache) get(k cacheKey, now time.Time) (*dns.Msg, *entry) {
	if c == nil {
		return nil, nil
	}
	e, ok := c.shard(k).Get(k)
	if !ok {
		return nil, nil
	}
	if !now.Before(e.expires) {
		c.shard(k).Remove(k)
		return nil, nil
	}
	m := new(dns.Msg)
	if m.Unpack(e.wire) != nil {
		c.shard(k).Remove(k)
		return nil, nil
	}
	age := uint32(now.Sub(e.stored) / time.Second)
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			h := rr.Header()
			if h.Rrtype == dns.TypeOPT {
				continue
			}
			h.Ttl = max(h.Ttl, age) - age
		}
	}
	return m, e
}

// put stores a filtered answer, packed, if it is cacheable (and packs),
// and returns its entry (nil if not stored). m is not kept.
func (c *cache) put(k cacheKey, m *dns.Msg, strip stripInfo, upstream string, now time.Time) *entry {
	if c == nil {
		return nil
	}
	ttl, ok := c.lifetime(m)
	if !ok {
		return nil
	}
	w, err := m.Pack()
	if err != nil {
		return nil
	}
	offs, err := ttlOffsets(w)
	if err != nil {
		return nil
	}
	e := &entry{wire: w, ttls: offs, rcode: m.Rcode, strip: strip, upstream: upstream, stored: now, expires: now.Add(ttl)}
	e.qnameLen, _ = skipName(w, 12)
	e.qnameLen -= 12
	for _, rr := range m.Answer {
		e.answers = append(e.answers, rrValue(rr))
		switch rr := rr.(type) {
		case *dns.A:
			if a, ok := netip.AddrFromSlice(rr.A); ok {
				e.addrs = append(e.addrs, entryAddr{rr.Hdr.Name, a})
			}
		case *dns.AAAA:
			if a, ok := netip.AddrFromSlice(rr.AAAA); ok {
				e.addrs = append(e.addrs, entryAddr{rr.Hdr.Name, a})
			}
		}
	}
	c.shard(k).Add(k, e)
	return e
}

// lookup returns a live entry without copying it.
func (c *cache) lookup(k cacheKey, now time.Time) *entry {
	if c == nil {
		return nil
	}
	e, ok := c.shard(k).Get(k)
	if !ok || !now.Before(e.expires) {
		return nil
	}
	return e
}

// lifetime is how long m may be served from the cache: the smallest TTL
// of its records for a positive answer, the SOA's negative TTL (RFC 2308)
// for NXDOMAIN or NODATA, clamped; failures are not cached.
func (c *cache) lifetime(m *dns.Msg) (time.Duration, bool) {
	if m.Truncated || (m.Rcode != dns.RcodeSuccess && m.Rcode != dns.RcodeNameError) {
		return 0, false
	}
	if m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0 {
		ttl := uint32(1<<31 - 1)
		for _, rr := range m.Answer {
			ttl = min(ttl, rr.Header().Ttl)
		}
		return clamp(time.Duration(ttl)*time.Second, c.minTTL, c.maxTTL), true
	}
	for _, rr := range m.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			ttl := time.Duration(min(soa.Hdr.Ttl, soa.Minttl)) * time.Second
			return clamp(ttl, c.minTTL, c.negTTL), true
		}
	}
	return clamp(c.negTTL, c.minTTL, c.negTTL), true
}

func clamp(d, lo, hi time.Duration) time.Duration {
	return max(lo, min(d, hi))
}

// cacheLookup answers from the cache when it can.
func (s *Server) cacheLookup(q *query) outcome {
	q.ckey = cacheKey{policy: q.sb.Policy, name: q.name, qtype: q.qtype, v6: q.sb.IPv6}
	if o := q.req.IsEdns0(); o != nil {
		q.ckey.do, q.ckey.edns = o.Do(), true
	}
	now := q.start
	if e := s.cache.lookup(q.ckey, now); e != nil {
		limit := 0
		if q.udp {
			limit = udpSize(q.req)
		}
		if q.wire = hitWire(e, q.req, now, uint32(s.cfg.AnswerTTL/time.Second), limit); q.wire != nil {
			q.resp, q.cacheHit, q.strip, q.upstream, q.answers = nil, true, e.strip, e.upstream, e.answers
			q.hit = e
			return next
		}
	}
	m, e := s.cache.get(q.ckey, now)
	if m == nil {
		return next
	}
	m.Question = q.req.Question // the client's spelling
	q.resp, q.cacheHit, q.strip, q.upstream = m, true, e.strip, e.upstream
	return next
}
