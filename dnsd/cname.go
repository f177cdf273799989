package dnsd

import (
	"strings"

	"github.com/miekg/dns"

	"airlock/audit"
	"airlock/policies"
)

// maxHops bounds the CNAME hops an event records (docs/events.md,
// dns.chain).
const maxHops = 16

// cnameChain decides each CNAME target of an answer under the sandbox's
// policy, in answer order, for the event. It decides nothing about the
// answer: the asked name's verdict stands, and every address is still
// checked by the rebinding guard.
func (s *Server) cnameChain(q *query, rrs []dns.RR) []audit.DNSHop {
	var hops []audit.DNSHop
	for _, rr := range rrs {
		c, ok := rr.(*dns.CNAME)
		if !ok {
			continue
		}
		if len(hops) == maxHops {
			break
		}
		name := strings.ToLower(dns.Fqdn(c.Target))
		v := q.sb.Policy.Decide(policies.Request{Stage: policies.StageDNS, Host: strings.TrimSuffix(name, "."), QType: q.qtype})
		hops = append(hops, audit.DNSHop{Name: name, Verdict: v.Action.String(),
			Rule: s.rules.get(v.Rule, policies.Rule.String), WouldDeny: v.WouldDeny})
	}
	return hops
}
