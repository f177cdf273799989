package preview

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"airlock/audit"
)

// A flood of requests the listener refuses before any preview takes them
// (a host that names no live preview, CONNECT, absolute-form) or over a
// preview's own rate limit must not become a flood of audit records. Per
// source — a client (its IPv4 address or IPv6 /64) or a preview — the
// first such request of an interval is written as it happens; the rest
// are counted and written as one record (ingress.count) when the interval
// ends. Requests naming no live preview are also rate-limited per client.

// floodSlot is one source's interval.
type floodSlot struct {
	written bool        // a record was written in this interval
	held    int64       // requests counted since, not yet written
	last    audit.Event // the last one held: its fields stand for the rest
}

// note returns the record to write now, if any.
func (s *floodSlot) note(ev audit.Event) (audit.Event, bool) {
	if !s.written {
		s.written = true
		return ev, true
	}
	s.held++
	s.last = ev
	return audit.Event{}, false
}

// flush ends the interval: it returns the aggregate of the held requests,
// if any, and whether anything happened in the interval at all.
func (s *floodSlot) flush(now time.Time) (ev audit.Event, ok, active bool) {
	active = s.written
	if s.held > 0 {
		ev, ok = s.last, true
		in := *ev.Ingress
		in.Count = s.held
		ev.Ingress, ev.Time = &in, now.UTC()
	}
	*s = floodSlot{}
	return ev, ok, active
}

// overflowKey is the one slot every client shares once the table is full.
const overflowKey = "other"

type strayClient struct {
	slot  floodSlot
	limit *rate.Limiter
}

// strays are the clients whose requests named no live preview: their
// rate limits and their records' intervals, at most max of them (the
// rest share overflowKey), idle ones forgotten at each flush.
type strays struct {
	mu      sync.Mutex
	rate    rate.Limit
	burst   int
	max     int
	clients map[string]*strayClient
}

func newStrays(r float64, burst, max int) *strays {
	return &strays{rate: rate.Limit(r), burst: burst, max: max, clients: map[string]*strayClient{}}
}

// client returns key's entry and the key it is kept under (overflowKey
// once the table is full); call with mu held.
func (s *strays) client(key string) (*strayClient, string) {
	if c, ok := s.clients[key]; ok {
		return c, key
	}
	if len(s.clients) >= s.max {
		key = overflowKey
		if c, ok := s.clients[key]; ok {
			return c, key
		}
	}
	c := &strayClient{limit: rate.NewLimiter(s.rate, s.burst)}
	s.clients[key] = c
	return c, key
}

// allow takes one request of key from its rate limit.
func (s *strays) allow(key string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, _ := s.client(key)
	return c.limit.AllowN(now, 1)
}

// note is floodSlot.note for key's slot; an aggregate names the client
// by its key (it stands for many connections).
func (s *strays) note(key string, ev audit.Event) (audit.Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, key := s.client(key)
	out, ok := c.slot.note(ev)
	if !ok {
		c.slot.last.Ingress.Client = key
	}
	return out, ok
}

// flush ends every client's interval and returns the aggregates; a
// client with nothing in the interval is forgotten (its limiter has had
// the interval to refill).
func (s *strays) flush(now time.Time) []audit.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []audit.Event
	for k, c := range s.clients {
		ev, ok, active := c.slot.flush(now)
		if ok {
			out = append(out, ev)
		}
		if !active {
			delete(s.clients, k)
		}
	}
	return out
}

func (s *strays) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clients)
}

// clientKey is the rate-limit key of a remote address: the IPv4 address,
// or the IPv6 /64 (one host usually holds a whole /64).
func clientKey(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return overflowKey
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}
