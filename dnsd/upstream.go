package dnsd

import (
	"time"

	"github.com/miekg/dns"

	"airlock/dnsd/internal/upstream"
)

// A UDP reader forwards a cache miss without a goroutine per query: the
// chain's forward step registers the miss's first attempt on an upstream
// socket (internal/upstream) and queues it in the reader's Sender, which
// sends the misses of a read batch in one sendmmsg per socket. The
// socket's reader goroutine matches the answer, resumes the query's chain
// where it waited (filter, cache, bindings, event) and sends the replies
// of its batch in one sendmmsg per client socket.
//
// Only the first attempt runs that way. When it times out, fails, comes
// back truncated, SERVFAIL or REFUSED, the query goes on to a worker
// (dispatchSlow), whose forward step carries on from the next attempt with
// the rest of the time budget, blocking on the same upstream sockets.

// sendMiss begins the exchange of p's cache miss on the reader (see
// above); a miss that cannot go that way (an identical query in flight to
// join, no UDP upstream, a query that does not pack in the packet) goes to
// a worker. Either way p is no longer the reader's.
func (s *Server) sendMiss(p *packet) {
	rd := p.rd
	p.rd, p.batched = nil, false
	q := &p.q
	ups := s.fwd.upstreamsFor(q.sb.Policy)
	if len(ups) == 0 || s.ctx.Err() != nil {
		s.dispatchSlow(p)
		return
	}
	at := s.fwd.firstAttempt()
	socks := s.udpSocks(ups[at.start%len(ups)])
	if socks == nil {
		s.dispatchSlow(p)
		return
	}
	c := s.fwd.beginNew(q.ckey)
	if c == nil {
		s.dispatchSlow(p) // an identical query is in flight: a worker joins it
		return
	}
	q.call, q.at = c, at // from here on a worker carries on from q.at
	m := c.query(q.ckey, q.req.CheckingDisabled)
	b, err := m.PackBuffer(p.upq[:])
	if err != nil || &b[0] != &p.upq[0] {
		s.dispatchSlow(p)
		return
	}
	q.at.next = 1
	// Once registered, the packet is the upstream socket's: only b is
	// still the reader's, until it is sent.
	dl := time.Now().Add(s.fwd.attempt)
	if dl.After(at.end) {
		dl = at.end
	}
	pend, err := socks.Register(p, b, q.ckey.name, q.ckey.qtype, dl)
	if err != nil {
		q.at.next = 0 // not sent: the worker starts with the first attempt
		s.dispatchSlow(p)
		return
	}
	rd.send.Add(pend, b)
}

// udpSocks returns the upstream sockets of u, or nil when u is not asked
// over UDP (DNS over TLS, or an exchanger other than the real one).
func (s *Server) udpSocks(u Upstream) *upstream.Socks[*packet] {
	x, ok := s.fwd.x.(*netExchanger)
	if !ok || u.TLS != nil {
		return nil
	}
	socks, err := x.pool.Socks(u.Addr)
	if err != nil {
		return nil
	}
	return socks
}

// upEvents is the server as the upstream pool's Handler.
type upEvents Server

var _ upstream.Handler[*packet] = (*upEvents)(nil)

// Answered resumes the queries whose first attempt was answered and sends
// their replies.
func (h *upEvents) Answered(batch []upstream.Answer[*packet]) {
	s := (*Server)(h)
	for i := range batch {
		if !s.upAnswer(batch[i].W, batch[i].Msg, batch[i].Upstream) {
			batch[i].W = nil
		}
	}
	s.sendReplies(batch)
}

// Failed hands a first attempt that timed out or was not sent to a worker,
// which goes on with the next attempt.
func (h *upEvents) Failed(p *packet, up string, err error) {
	p.q.at.last = result{upstream: up, err: err}
	(*Server)(h).dispatchSlow(p)
}

// upAnswer resumes p's query with its first attempt's answer r; true when
// the reply waits in p to be sent.
func (s *Server) upAnswer(p *packet, r *dns.Msg, up string) bool {
	q := &p.q
	if r.Truncated || retryable(r) {
		q.at.last, q.at.tcp = result{msg: r, upstream: up}, r.Truncated
		s.dispatchSlow(p)
		return false
	}
	q.call.res = result{msg: r, upstream: up}
	q.got = true
	p.batched, p.queued = true, false
	if !s.resume(q) {
		return false // cannot happen: no step after forward waits
	}
	if !p.queued {
		packetPool.Put(p)
		return false
	}
	return true
}

// sendReplies sends the replies waiting in the batch's packets (those
// still set), one batch per client socket, and returns the packets to
// the pool.
func (s *Server) sendReplies(batch []upstream.Answer[*packet]) {
	b := getReplies(s)
	defer replyPool.Put(b)
	for i := range batch {
		p := batch[i].W
		if p == nil {
			continue
		}
		us := p.sock
		for j := i; j < len(batch); j++ {
			if p := batch[j].W; p != nil && p.sock == us {
				b.add(p)
			}
		}
		b.flush(us)
		for j := i; j < len(batch); j++ {
			if p := batch[j].W; p != nil && p.sock == us {
				batch[j].W = nil
				packetPool.Put(p)
			}
		}
	}
}
