package dnsd

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"airlock/dnsd/internal/upstream"
)

// upstreamUDPSize is the EDNS buffer size dnsd advertises upstream.
const upstreamUDPSize = 1232

// exchanger sends one query to one upstream and waits for the answer
// until deadline (or until ctx ends).
type exchanger interface {
	exchange(ctx context.Context, m *dns.Msg, u Upstream, deadline time.Time) (*dns.Msg, error)
}

// netExchanger is the real exchanger: UDP on the upstream sockets of the
// pool (random source port and ID per query, strict matching; see
// internal/upstream) with TCP fallback on truncation, or DNS over TLS.
type netExchanger struct {
	tcp  dns.Client
	pool *upstream.Pool[*packet]
}

func newNetExchanger(h upstream.Handler[*packet]) *netExchanger {
	return &netExchanger{tcp: dns.Client{Net: "tcp"}, pool: upstream.NewPool(h)}
}

func (x *netExchanger) exchange(ctx context.Context, m *dns.Msg, u Upstream, deadline time.Time) (*dns.Msg, error) {
	if u.TLS != nil {
		ctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		c := dns.Client{Net: "tcp-tls", TLSConfig: u.TLS}
		r, _, err := c.ExchangeContext(ctx, m, u.Addr)
		return r, err
	}
	socks, err := x.pool.Socks(u.Addr)
	if err != nil {
		return nil, err
	}
	r, err := socks.Exchange(ctx, m, deadline)
	if err == nil && r.Truncated {
		return x.overTCP(ctx, m, u, deadline)
	}
	return r, err
}

// overTCP asks u over TCP, under a new random ID.
func (x *netExchanger) overTCP(ctx context.Context, m *dns.Msg, u Upstream, deadline time.Time) (*dns.Msg, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	m.Id = upstream.NewID()
	r, _, err := x.tcp.ExchangeContext(ctx, m, u.Addr)
	return r, err
}

func (x *netExchanger) close() { x.pool.Close() }

// result is a finished upstream exchange.
type result struct {
	msg      *dns.Msg
	upstream string
	err      error
	// own: msg went to this query alone (no identical query joined), which
	// may change it instead of copying it.
	own bool
}

// call is one in-flight exchange that identical queries wait on. It also
// holds the upstream query, so a miss allocates one object for both.
type call struct {
	done   chan struct{} // made when a query joins (under forwarder.mu)
	res    result
	joined int // queries waiting on it besides the one that made it (under forwarder.mu)

	msg   dns.Msg
	quest [1]dns.Question
	opt   dns.OPT
	extra [1]dns.RR
}

// forwarder sends queries upstream with retries and coalesces identical
// in-flight queries.
type forwarder struct {
	x                exchanger
	timeout, attempt time.Duration
	rr               atomic.Uint32
	mu               sync.Mutex
	calls            map[cacheKey]*call
	upstreams        sync.Map // Policy -> []Upstream
	defaults         []Upstream
}

// forward sends a cache miss upstream. On a UDP reader it never waits:
// the miss goes to an upstream socket (or a worker), which resumes it.
func (s *Server) forward(q *query) outcome {
	switch {
	case q.cacheHit:
		return next
	case q.got:
		// The upstream socket's reader resumed q with its answer.
		c := q.call
		q.call, q.got = nil, false
		return s.forwarded(q, s.fwd.complete(q.ckey, c))
	case q.pkt != nil && q.pkt.rd != nil:
		s.sendMiss(q.pkt)
		return wait
	case q.call != nil:
		// A UDP reader began the exchange; its first attempt did not end
		// in a usable answer: carry on from there.
		c := q.call
		q.call = nil
		c.res = s.fwd.exchange(q.ctx, c, q.ckey, s.fwd.upstreamsFor(q.sb.Policy), q.req.CheckingDisabled, q.at)
		return s.forwarded(q, s.fwd.complete(q.ckey, c))
	}
	return s.forwarded(q, s.fwd.do(q.ctx, q.ckey, q.sb.Policy, q.req.CheckingDisabled))
}

// forwarded takes the result of q's exchange.
func (s *Server) forwarded(q *query, res result) outcome {
	q.upstream = res.upstream
	if res.err != nil {
		q.err = res.err
		q.resp = servfail(q.req)
		return answer
	}
	q.resp, q.respOwned = reply(q.req, res.msg, res.own), res.own
	return next
}

// reply turns an upstream answer into the answer to req: the client's ID
// and question, no upstream EDNS options. It changes up itself when own,
// and then keeps up's question (the same as req's but for letter case, in
// storage of its own: the answer may be cached); the caller writes req's.
func reply(req, up *dns.Msg, own bool) *dns.Msg {
	m := up
	if !own {
		m = up.Copy()
		m.Question = req.Question
	}
	m.Id = req.Id
	m.Authoritative = false
	m.RecursionDesired = req.RecursionDesired
	m.RecursionAvailable = true
	var old *dns.OPT
	m.Extra, old = dropOPT(m.Extra)
	if o := req.IsEdns0(); o != nil {
		if old == nil {
			m.SetEdns0(dns.DefaultMsgSize, o.Do())
			return m
		}
		// Reuse the upstream's OPT record (m is this query's own, or a
		// deep copy), emptied:
		// what SetEdns0 builds, without allocating.
		*old = dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
		old.SetUDPSize(dns.DefaultMsgSize)
		if o.Do() {
			old.SetDo()
		}
		m.Extra = append(m.Extra, old)
	}
	return m
}

// dropOPT removes the OPT records from rrs, in place, and returns the
// last one removed.
func dropOPT(rrs []dns.RR) ([]dns.RR, *dns.OPT) {
	out := rrs[:0]
	var opt *dns.OPT
	for _, rr := range rrs {
		if o, ok := rr.(*dns.OPT); ok {
			opt = o
			continue
		}
		if rr.Header().Rrtype != dns.TypeOPT {
			out = append(out, rr)
		}
	}
	return out, opt
}

// do runs or joins the exchange for k.
func (f *forwarder) do(ctx context.Context, k cacheKey, p Policy, cd bool) result {
	c, joined := f.begin(k)
	if joined {
		select {
		case <-c.done:
			return c.res
		case <-ctx.Done():
			return result{err: ctx.Err()}
		}
	}
	c.res = f.exchange(ctx, c, k, f.upstreamsFor(p), cd, f.firstAttempt())
	return f.complete(k, c)
}

// begin returns the in-flight call for k, joined (true: wait on its done
// channel), or a new call the caller must run and complete.
func (f *forwarder) begin(k cacheKey) (*call, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.calls[k]; ok {
		c.joined++
		if c.done == nil {
			c.done = make(chan struct{})
		}
		return c, true
	}
	c := new(call)
	f.calls[k] = c
	return c, false
}

// beginNew makes a new call for k, or returns nil when one is in flight.
func (f *forwarder) beginNew(k cacheKey) *call {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.calls[k]; ok {
		return nil
	}
	c := new(call)
	f.calls[k] = c
	return c
}

// complete ends the call begin made for k (c.res set): those who joined
// get its result.
func (f *forwarder) complete(k cacheKey, c *call) result {
	f.mu.Lock()
	delete(f.calls, k)
	own := c.joined == 0 // nobody joins once the call is out of the map
	done := c.done
	f.mu.Unlock()
	if done != nil {
		close(done)
	}
	res := c.res
	res.own = own
	return res
}

// attempts is where a query's walk over its upstreams stands: the
// upstream it started with, the next attempt, the end of its time budget,
// the last attempt's result, and whether that attempt's answer came
// truncated (the same upstream is then asked over TCP first).
type attempts struct {
	start, next int
	end         time.Time
	last        result
	tcp         bool
}

// firstAttempt begins a query's walk over its upstreams now.
func (f *forwarder) firstAttempt() attempts {
	return attempts{start: int(f.rr.Add(1)), end: time.Now().Add(f.timeout)}
}

func (f *forwarder) upstreamsFor(p Policy) []Upstream {
	if v, ok := f.upstreams.Load(p); ok {
		return v.([]Upstream)
	}
	list := f.defaults
	if names := p.DNS().Upstreams; len(names) > 0 {
		list = nil
		for _, n := range names {
			if u, err := ParseUpstream(n); err == nil {
				list = append(list, u)
			}
		}
	}
	f.upstreams.Store(p, list)
	return list
}

var errNoUpstream = errors.New("no upstream configured")

// exchange tries the upstreams in turn, from where at stands, until one
// answers usefully or the query's time budget is spent.
func (f *forwarder) exchange(ctx context.Context, c *call, k cacheKey, ups []Upstream, cd bool, at attempts) result {
	if len(ups) == 0 {
		return result{err: errNoUpstream}
	}
	m := c.query(k, cd)
	last := at.last
	if at.tcp && at.next > 0 {
		// The UDP answer of the attempt before came truncated: ask that
		// upstream over TCP (what the exchanger does after a truncation).
		u := ups[(at.start+at.next-1)%len(ups)]
		if x, ok := f.x.(*netExchanger); ok && u.TLS == nil && time.Now().Before(at.end) {
			r, err := x.overTCP(ctx, m, u, at.end)
			var done bool
			if last, done = attemptResult(m, r, u, err); done {
				return last
			}
		}
	}
	for i := at.next; ctx.Err() == nil && i < 3*len(ups); i++ {
		now := time.Now()
		if !now.Before(at.end) {
			break
		}
		u := ups[(at.start+i)%len(ups)]
		m.Id = upstream.NewID()
		dl := now.Add(f.attempt)
		if dl.After(at.end) {
			dl = at.end
		}
		r, err := f.x.exchange(ctx, m, u, dl)
		var done bool
		if last, done = attemptResult(m, r, u, err); done {
			return last
		}
	}
	if last.err == nil && last.msg != nil {
		return last // every upstream said SERVFAIL or REFUSED: pass it on
	}
	if last.err == nil {
		last.err = ctx.Err()
	}
	if last.err == nil {
		last.err = context.DeadlineExceeded
	}
	return last
}

// query builds the upstream query for k in c's own storage (what
// SetQuestion and SetEdns0 would build, without their allocations).
func (c *call) query(k cacheKey, cd bool) *dns.Msg {
	m := &c.msg
	m.RecursionDesired = true
	m.CheckingDisabled = cd
	c.quest[0] = dns.Question{Name: k.name, Qtype: k.qtype, Qclass: dns.ClassINET}
	m.Question = c.quest[:]
	c.opt.Hdr = dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}
	c.opt.SetUDPSize(upstreamUDPSize)
	if k.do {
		c.opt.SetDo()
	}
	c.extra[0] = &c.opt
	m.Extra = c.extra[:]
	return m
}

// attemptResult is the result of one exchange of m with u; done reports
// that it is the answer (no other upstream is asked).
func attemptResult(m, r *dns.Msg, u Upstream, err error) (res result, done bool) {
	if err == nil {
		err = upstream.Check(m, r)
	}
	return result{msg: r, upstream: u.String(), err: err}, err == nil && !retryable(r)
}

// retryable reports an upstream's answer that another upstream may better:
// SERVFAIL or REFUSED.
func retryable(r *dns.Msg) bool {
	return r.Rcode == dns.RcodeServerFailure || r.Rcode == dns.RcodeRefused
}
