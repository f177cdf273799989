package dnsd

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/time/rate"

	"airlock/audit"
	"airlock/policies"
)

// Rules of queries refused before the policy sees them (audit Rule).
const (
	RuleMalformed     = "dnsd.malformed"      // does not parse, bad counts or name, not a query
	RuleUnknownSource = "dnsd.unknown_source" // no sandbox has the source address
	RuleQClass        = "dnsd.qclass"         // a class other than IN
)

// Queries refused before the policy (malformed, unknown source) cost the
// sender nothing, so their events are rate-limited per source address: a
// burst of noiseBurst, then noiseRate a second. What is suppressed is
// counted and reported in the source's next event, or by the sweeper in a
// summary event, so nothing leaves the log without a trace.
const (
	noiseRate    = 5
	noiseBurst   = 20
	noiseSources = 4096 // sources tracked; beyond, they share one bucket
)

type noiseLimiter struct {
	mu   sync.Mutex
	srcs map[netip.Addr]*noiseState
}

type noiseState struct {
	lim        *rate.Limiter
	suppressed int
	last       time.Time
}

// allow reports whether src may have an event now and, if so, how many of
// its events were suppressed since its last one.
func (l *noiseLimiter) allow(src netip.Addr, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.srcs == nil {
		l.srcs = make(map[netip.Addr]*noiseState)
	}
	st := l.srcs[src]
	if st == nil {
		if len(l.srcs) >= noiseSources {
			src = netip.Addr{} // the shared overflow bucket
			st = l.srcs[src]
		}
		if st == nil {
			st = &noiseState{lim: rate.NewLimiter(noiseRate, noiseBurst)}
			l.srcs[src] = st
		}
	}
	st.last = now
	if !st.lim.AllowN(now, 1) {
		st.suppressed++
		return false, 0
	}
	n := st.suppressed
	st.suppressed = 0
	return true, n
}

// sweep returns the suppressed counts not yet reported, and forgets
// sources idle for a minute.
func (l *noiseLimiter) sweep(now time.Time) map[netip.Addr]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out map[netip.Addr]int
	for src, st := range l.srcs {
		if st.suppressed > 0 {
			if out == nil {
				out = make(map[netip.Addr]int)
			}
			out[src], st.suppressed = st.suppressed, 0
		}
		if now.Sub(st.last) > time.Minute {
			delete(l.srcs, src)
		}
	}
	return out
}

// reportSuppressed emits one summary event per source whose events the
// limiter held back since its last event.
func (s *Server) reportSuppressed(now time.Time) {
	for src, n := range s.noise.sweep(now) {
		sb, _ := s.cfg.Identifier.Identify(src)
		ev := audit.New(audit.KindDNS, sb.ID)
		ev.Verdict, ev.Rule = policies.ActionDeny.String(), RuleMalformed
		ev.Reason = fmt.Sprintf("%d refused queries not logged (rate limit)", n)
		client := src.String()
		if !src.IsValid() {
			client = "" // the overflow bucket: many sources
		}
		ev.DNS = &audit.DNS{Client: client}
		s.emit.Emit(ev)
	}
}

// logUnparsed logs a message that does not parse (dns.Server answered it
// FORMERR already, or dropped it when even the header is short).
func (s *Server) logUnparsed(src netip.Addr, local net.Addr, m []byte, err error) {
	req := new(dns.Msg)
	if len(m) >= 2 {
		req.Id = binary.BigEndian.Uint16(m)
	}
	q := &query{ctx: s.ctx, start: time.Now(), req: req, src: src, local: local}
	s.markUnparsed(q, err)
	s.logQuery(q)
}

// markUnparsed sets q up as a FORMERR for a message that does not parse.
func (s *Server) markUnparsed(q *query, err error) {
	if sb, ok := s.cfg.Identifier.Identify(q.src); ok {
		q.sb = sb
	}
	q.rule, q.reason = RuleMalformed, "malformed query: "+err.Error()
	q.resp = new(dns.Msg)
	q.resp.Response, q.resp.Rcode = true, dns.RcodeFormatError
}

// noticeReader is a dns.Server reader that logs messages that do not
// parse, which dns.Server would answer without calling the handler.
type noticeReader struct {
	dns.Reader
	s *Server
}

func (r noticeReader) check(src net.Addr, local net.Addr, m []byte) {
	if err := new(dns.Msg).Unpack(m); err != nil {
		r.s.logUnparsed(addrOf(src), local, m, err)
	}
}

func (r noticeReader) ReadTCP(conn net.Conn, timeout time.Duration) ([]byte, error) {
	m, err := r.Reader.ReadTCP(conn, timeout)
	if err == nil {
		r.check(conn.RemoteAddr(), conn.LocalAddr(), m)
	}
	return m, err
}

func (r noticeReader) ReadUDP(conn *net.UDPConn, timeout time.Duration) ([]byte, *dns.SessionUDP, error) {
	m, sess, err := r.Reader.ReadUDP(conn, timeout)
	if err == nil {
		r.check(sess.RemoteAddr(), conn.LocalAddr(), m)
	}
	return m, sess, err
}

func (r noticeReader) ReadPacketConn(conn net.PacketConn, timeout time.Duration) ([]byte, net.Addr, error) {
	pr, ok := r.Reader.(dns.PacketConnReader)
	if !ok {
		return nil, nil, fmt.Errorf("dnsd: reader cannot read packet conns")
	}
	m, addr, err := pr.ReadPacketConn(conn, timeout)
	if err == nil {
		r.check(addr, conn.LocalAddr(), m)
	}
	return m, addr, err
}

func (s *Server) noticeReader(r dns.Reader) dns.Reader { return noticeReader{Reader: r, s: s} }

// acceptQueries lets every message but a response reach the handler, so
// bad counts and opcodes are refused and logged there (dns.Server's
// default refuses them without a call).
func acceptQueries(dh dns.Header) dns.MsgAcceptAction {
	if dh.Bits&(1<<15) != 0 {
		return dns.MsgIgnore
	}
	return dns.MsgAccept
}
