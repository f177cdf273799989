package dnsd

import (
	"log/slog"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"airlock/policies"
)

// defaultQTypes are forwarded when a policy's [dns] names none.
var defaultQTypes = []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeCNAME, dns.TypeHTTPS, dns.TypeSVCB, dns.TypeMX, dns.TypeSRV}

// neverTypes are refused whatever a policy says: meta and zone-transfer
// types are never forwarded for a sandbox.
var neverTypes = []uint16{dns.TypeANY, dns.TypeNULL, dns.TypeAXFR, dns.TypeIXFR, dns.TypeMAILA, dns.TypeMAILB, dns.TypeOPT, dns.TypeTSIG, dns.TypeTKEY}

// decide asks the sandbox's policy about the name, then checks the query type.
func (s *Server) decide(q *query) bool {
	q.verdict = q.sb.Policy.Decide(policies.Request{Stage: policies.StageDNS, Host: strings.TrimSuffix(q.name, "."), QType: q.qtype})
	if !resolves(q.verdict.Action) {
		switch q.verdict.Rule.Name {
		case "dns.qtypes":
			// The name may exist: REFUSED, not NXDOMAIN, so the client's
			// negative cache does not hide its other types.
			q.resp = refusal(q.req, dns.RcodeRefused, dns.ExtendedErrorCodeProhibited, "query type not allowed")
		case "dns.max_label":
			q.guard = GuardLabelLength
		case "dns.max_name":
			q.guard = GuardNameLength
		}
		if q.resp == nil {
			q.resp = s.blockAnswer(q, "blocked by policy: "+q.verdict.Rule.Name)
		}
		return false
	}
	if !qtypeAllowed(q.sb.Policy.DNS(), q.verdict.Cat, q.qtype) {
		q.verdict.Action, q.verdict.WouldDeny = policies.ActionDeny, false
		q.verdict.Rule = policies.Rule{Name: "dns.qtypes"}
		q.verdict.Reason = "query type " + dns.Type(q.qtype).String() + " not allowed"
		q.resp = refusal(q.req, dns.RcodeRefused, dns.ExtendedErrorCodeProhibited, "query type not allowed")
		return false
	}
	return true
}

// resolves says whether a verdict lets the name be resolved. Ask resolves:
// the connection that follows is held by the proxy, where a human decides.
func resolves(a policies.Action) bool {
	return a == policies.ActionAllow || a == policies.ActionAudit || a == policies.ActionAsk
}

func qtypeAllowed(cfg policies.DNSConfig, cat *policies.Category, t uint16) bool {
	if slices.Contains(neverTypes, t) {
		return false
	}
	allowed := cfg.QTypes
	if len(allowed) == 0 {
		allowed = defaultQTypes
	}
	if slices.Contains(allowed, t) {
		return true
	}
	return cat != nil && slices.Contains(cat.DNSTypes, t)
}

// blockAnswer is the policy's answer to a denied name: NXDOMAIN (default)
// or REFUSED, with the Extended DNS Error "Blocked".
func (s *Server) blockAnswer(q *query, text string) *dns.Msg {
	rcode := dns.RcodeNameError
	if q.sb.Policy.DNS().Block == policies.BlockRefused {
		rcode = dns.RcodeRefused
	}
	return refusal(q.req, rcode, dns.ExtendedErrorCodeBlocked, text)
}

func levelFor(verdict string) slog.Level {
	if verdict == policies.ActionAllow.String() {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}
