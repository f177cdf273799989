package dnsd

import (
	"strings"

	"github.com/miekg/dns"

	"airlock/policies"
)

// decide asks the sandbox's policy about the name and its query type. The
// policy alone decides which types are answered (its [dns] qtypes, default
// A AAAA CNAME HTTPS SVCB MX SRV, and a category's dns_types): ANY, NULL
// and the rest are refused under "dns.qtypes" unless the policy lists them,
// and the policy language rejects the meta and zone-transfer types.
func (s *Server) decide(q *query) outcome {
	q.verdict = q.sb.Policy.Decide(policies.Request{Stage: policies.StageDNS, Host: strings.TrimSuffix(q.name, "."), QType: q.qtype})
	if !resolves(q.verdict.Action) {
		switch q.verdict.Rule.Name {
		case "dns.qtypes":
			// The name may exist: REFUSED, not NXDOMAIN, so the client's
			// negative cache does not hide its other types.
			q.resp = q.refuse(dns.RcodeRefused, dns.ExtendedErrorCodeProhibited, "query type not allowed")
		case "dns.max_label":
			q.guard = GuardLabelLength
		case "dns.max_name":
			q.guard = GuardNameLength
		}
		if q.resp == nil {
			q.resp = s.blockAnswer(q, s.blockTexts.get(q.verdict.Rule.Name, blockText))
		}
		return answer
	}
	return next
}

// resolves says whether a verdict lets the name be resolved. Ask resolves:
// the connection that follows is held by the proxy, where a human decides.
func resolves(a policies.Action) bool {
	return a == policies.ActionAllow || a == policies.ActionAudit || a == policies.ActionAsk
}

func blockText(rule string) string { return "blocked by policy: " + rule }

// blockAnswer is the policy's answer to a denied name: NXDOMAIN (default)
// or REFUSED, with the Extended DNS Error "Blocked".
func (s *Server) blockAnswer(q *query, text string) *dns.Msg {
	rcode := dns.RcodeNameError
	if q.sb.Policy.DNS().Block == policies.BlockRefused {
		rcode = dns.RcodeRefused
	}
	return q.refuse(rcode, dns.ExtendedErrorCodeBlocked, text)
}
