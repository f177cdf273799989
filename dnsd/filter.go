package dnsd

import (
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"airlock/audit"
	"airlock/policies"
)

// filterStep shapes a fresh upstream answer for the sandbox (rebinding
// guard, ECH removal, no AAAA without IPv6), caches it, then caps TTLs and
// records the bindings, for fresh and cached answers alike.
func (s *Server) filterStep(q *query) outcome {
	now := q.start
	if !q.cacheHit {
		now = time.Now() // after the upstream's answer
		q.strip = s.filterAnswer(q.resp, reacher(q.sb.Policy, q.verdict), q.sb.IPv6)
		q.strip.chain = s.cnameChain(q, q.resp.Answer)
		e := s.cache.put(q.ckey, q.resp, q.strip, q.upstream, now)
		if e != nil && s.serveEntry(q, e, now) {
			return next // written from the entry's packed answer, like a hit
		}
		q.resp.Question = q.req.Question
	}
	if q.hit != nil {
		// The packed answer's TTLs were aged and capped; bind for as long.
		ttl := min(q.hit.expires.Sub(now), s.cfg.AnswerTTL)
		s.bindings.recordHit(q.hit, q.sb.ID, q.name, now.Add(ttl))
		return next
	}
	capTTL(q.resp, uint32(s.cfg.AnswerTTL/time.Second))
	s.bindings.record(q.sb.ID, q.name, q.resp.Answer, now)
	return next
}

// serveEntry answers q from a cache entry's packed answer (aged, capped
// TTLs, the client's ID and spelling) and binds its addresses; false when
// the packed form does not fit the query.
func (s *Server) serveEntry(q *query, e *entry, now time.Time) bool {
	limit := 0
	if q.udp {
		limit = udpSize(q.req)
	}
	w := hitWire(e, q.req, now, uint32(s.cfg.AnswerTTL/time.Second), limit)
	if w == nil {
		return false
	}
	q.wire, q.hit, q.answers = w, e, e.answers
	ttl := min(e.expires.Sub(now), s.cfg.AnswerTTL)
	s.bindings.recordHit(e, q.sb.ID, q.name, now.Add(ttl))
	return true
}

// reacher returns the rebinding guard's test for one answer address: the
// policy's Reach for the verdict that let the name resolve.
func reacher(p Policy, v policies.Verdict) func(netip.Addr) policies.AddrDecision {
	return func(a netip.Addr) policies.AddrDecision { return p.Reach(a, v) }
}

// Why an address was removed from an answer when it is not the rebinding
// guard: the sandbox has no IPv6, so AAAA records and IPv6 hints are
// withheld (the event names them under this guard).
const stripNoIPv6 = "no-ipv6"

// GuardRebinding names the rebinding guard in events (audit.DNS.Guard)
// when it stripped addresses from an answer the policy allowed.
const GuardRebinding = "rebinding"

// stripInfo is what the answer filter removed, as the query's event shows
// it (Invariant 3: the decision is logged with what made it).
type stripInfo struct {
	addrs  []string // audit.DNS.Stripped
	guard  string   // audit.DNS.Guard: the guards that removed them, joined by ","
	reason string   // appended to the event's reason
	// chain is the answer's CNAME hops with the policy's verdict on each
	// (audit.DNS.Chain); kept here so cache hits carry it too.
	chain []audit.DNSHop
}

// removal is one address the filter took out, and why.
type removal struct {
	addr netip.Addr
	why  string // stripNoIPv6, or the address class the rebinding guard refused
}

// filterAnswer edits m in place and returns what it removed.
func (s *Server) filterAnswer(m *dns.Msg, reach func(netip.Addr) policies.AddrDecision, v6 bool) stripInfo {
	var removed []removal
	keep := func(a netip.Addr) bool {
		d := reach(a)
		if d.Allowed() {
			return true
		}
		removed = append(removed, removal{addr: d.Addr, why: stripWhy(d)})
		return false
	}
	withhold := func(a netip.Addr) { removed = append(removed, removal{addr: a, why: stripNoIPv6}) }
	m.Answer = filterRRs(m.Answer, keep, withhold, v6)
	m.Extra = filterRRs(m.Extra, keep, withhold, v6)
	m.Ns = filterRRs(m.Ns, keep, withhold, v6)
	return describeRemovals(removed)
}

// stripWhy names why the rebinding guard refused an address: its class
// ("own" for the appliance's addresses), and the rule when one decided
// ("special-purpose, deny.cidrs[0]").
func stripWhy(d policies.AddrDecision) string {
	if d.Rule.Name != "" {
		return d.Class.String() + ", " + d.Rule.Name
	}
	return d.Class.String()
}

// describeRemovals turns the removed addresses into the event's fields:
// "stripped 127.0.0.1 (loopback), 10.0.0.1 (private); withheld 2001:db8::1
// (no-ipv6)" under the guard "rebinding,no-ipv6".
func describeRemovals(removed []removal) stripInfo {
	var si stripInfo
	var stripped, withheld, guards, reasons []string
	for _, r := range removed {
		si.addrs = append(si.addrs, r.addr.String())
		if r.why == stripNoIPv6 {
			withheld = append(withheld, r.addr.String())
		} else {
			stripped = append(stripped, r.addr.String()+" ("+r.why+")")
		}
	}
	if len(stripped) > 0 {
		guards = append(guards, GuardRebinding)
		reasons = append(reasons, "stripped "+strings.Join(stripped, ", "))
	}
	if len(withheld) > 0 {
		guards = append(guards, stripNoIPv6)
		reasons = append(reasons, "withheld "+strings.Join(withheld, ", ")+" ("+stripNoIPv6+")")
	}
	si.guard, si.reason = strings.Join(guards, ","), strings.Join(reasons, "; ")
	return si
}

// filterRRs drops the records keep refuses; without IPv6 every AAAA
// record (and IPv6 hint) is handed to withhold instead.
func filterRRs(rrs []dns.RR, keep func(netip.Addr) bool, withhold func(netip.Addr), v6 bool) []dns.RR {
	out := rrs[:0]
	for _, rr := range rrs {
		switch rr := rr.(type) {
		case *dns.A:
			a, ok := netip.AddrFromSlice(rr.A)
			if !ok || !keep(a) {
				continue
			}
		case *dns.AAAA:
			a, ok := netip.AddrFromSlice(rr.AAAA)
			if ok && !v6 {
				withhold(a)
			}
			if !v6 || !ok || !keep(a) {
				continue
			}
		case *dns.HTTPS:
			rr.Value = filterSVCB(rr.Value, keep, withhold, v6)
		case *dns.SVCB:
			rr.Value = filterSVCB(rr.Value, keep, withhold, v6)
		}
		out = append(out, rr)
	}
	return out
}

// filterSVCB drops the ech parameter (so TLS keeps a visible SNI) and
// address hints the rebinding guard would strip.
func filterSVCB(kv []dns.SVCBKeyValue, keep func(netip.Addr) bool, withhold func(netip.Addr), v6 bool) []dns.SVCBKeyValue {
	out := kv[:0]
	for _, p := range kv {
		switch p := p.(type) {
		case *dns.SVCBECHConfig:
			continue
		case *dns.SVCBIPv4Hint:
			p.Hint = filterIPs(p.Hint, keep)
			if len(p.Hint) == 0 {
				continue
			}
		case *dns.SVCBIPv6Hint:
			if !v6 {
				for _, ip := range p.Hint {
					if a, ok := netip.AddrFromSlice(ip); ok {
						withhold(a)
					}
				}
				continue
			}
			p.Hint = filterIPs(p.Hint, keep)
			if len(p.Hint) == 0 {
				continue
			}
		}
		out = append(out, p)
	}
	return out
}

func filterIPs[T ~[]byte](ips []T, keep func(netip.Addr) bool) []T {
	out := ips[:0]
	for _, ip := range ips {
		if a, ok := netip.AddrFromSlice(ip); ok && keep(a) {
			out = append(out, ip)
		}
	}
	return out
}

// capTTL lowers every record's TTL to at most max seconds.
func capTTL(m *dns.Msg, maxTTL uint32) {
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT && h.Ttl > maxTTL {
				h.Ttl = maxTTL
			}
		}
	}
}
