package dnsd

import (
	"net/netip"
	"slices"
	"time"

	"github.com/miekg/dns"

	"airlock/policies"
)

// filterStep shapes a fresh upstream answer for the sandbox (rebinding
// guard, ECH removal, no AAAA without IPv6), caches it, then caps TTLs and
// records the bindings, for fresh and cached answers alike.
func (s *Server) filterStep(q *query) bool {
	now := time.Now()
	if !q.cacheHit {
		q.stripped = s.filterAnswer(q.resp, s.keeper(q.sb.Policy, q.verdict.Cat), q.sb.IPv6)
		s.cache.put(q.ckey, q.resp, q.stripped, q.upstream, now)
	}
	if q.hit != nil {
		// The packed answer's TTLs were aged and capped; bind for as long.
		ttl := min(q.hit.expires.Sub(now), s.cfg.AnswerTTL)
		s.bindings.recordFor(q.sb.ID, q.name, q.resp.Answer, now.Add(ttl))
		return true
	}
	capTTL(q.resp, uint32(s.cfg.AnswerTTL/time.Second))
	s.bindings.record(q.sb.ID, q.name, q.resp.Answer, now)
	return true
}

// keeper returns the rebinding guard's test for one answer: public
// addresses, or those the deciding category names.
func (s *Server) keeper(p Policy, cat *policies.Category) func(netip.Addr) bool {
	ap, hasAddrRule := p.(addrPolicy)
	return func(a netip.Addr) bool {
		if slices.Contains(s.cfg.Own, a) {
			return false
		}
		if hasAddrRule {
			return ap.AddrAllowed(a, cat) || inPrefixes(s.cfg.UpstreamAllow, a)
		}
		return s.cfg.Public(a) || internal(cat, a) || inPrefixes(s.cfg.UpstreamAllow, a)
	}
}

func inPrefixes(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// filterAnswer edits m in place and returns the addresses it removed.
func (s *Server) filterAnswer(m *dns.Msg, allowed func(netip.Addr) bool, v6 bool) []string {
	var stripped []string
	keep := func(a netip.Addr) bool {
		a = a.Unmap()
		if allowed(a) {
			return true
		}
		stripped = append(stripped, a.String())
		return false
	}
	m.Answer = filterRRs(m.Answer, keep, v6)
	m.Extra = filterRRs(m.Extra, keep, v6)
	m.Ns = filterRRs(m.Ns, keep, v6)
	return stripped
}

// internal reports whether the deciding category names a in its CIDRs.
func internal(cat *policies.Category, a netip.Addr) bool {
	if cat == nil {
		return false
	}
	for _, p := range cat.CIDRs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func filterRRs(rrs []dns.RR, keep func(netip.Addr) bool, v6 bool) []dns.RR {
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
			if !v6 || !ok || !keep(a) {
				continue
			}
		case *dns.HTTPS:
			rr.Value = filterSVCB(rr.Value, keep, v6)
		case *dns.SVCB:
			rr.Value = filterSVCB(rr.Value, keep, v6)
		}
		out = append(out, rr)
	}
	return out
}

// filterSVCB drops the ech parameter (so TLS keeps a visible SNI) and
// address hints the rebinding guard would strip.
func filterSVCB(kv []dns.SVCBKeyValue, keep func(netip.Addr) bool, v6 bool) []dns.SVCBKeyValue {
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
