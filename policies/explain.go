package policies

import (
	"sort"
	"strings"
)

// Consideration is one rule Explain looked at and what came of it.
type Consideration struct {
	Rule    Rule
	Outcome string
}

// Explanation is a verdict with the rules that were considered on the way
// and why they did or did not decide.
type Explanation struct {
	Request    Request
	Verdict    Verdict
	Considered []Consideration
}

// trace records considerations; a nil trace records nothing (Decide).
type trace struct{ steps []Consideration }

func (t *trace) add(r Rule, outcome string) {
	if t == nil {
		return
	}
	t.steps = append(t.steps, Consideration{Rule: r, Outcome: outcome})
}

// Explain decides like Decide and also reports every rule considered: the
// ones on the decision path, then the host patterns and cidrs of other
// categories that also match but were less specific, and the categories
// that do not cover the destination at all.
func (p *Policy) Explain(r Request) Explanation {
	tr := &trace{}
	v := p.decide(&r, tr)
	seen := map[string]bool{}
	for _, s := range tr.steps {
		seen[s.Rule.Name] = true
	}
	ex := Explanation{Request: r, Verdict: v, Considered: tr.steps}
	decided := false
	for i := len(ex.Considered) - 1; i >= 0; i-- {
		if ex.Considered[i].Rule.Name == v.Rule.Name {
			ex.Considered[i].Outcome += " — decided"
			decided = true
			break
		}
	}
	if !decided {
		ex.Considered = append(ex.Considered, Consideration{Rule: v.Rule, Outcome: v.Reason + " — decided"})
	}
	ex.Considered = append(ex.Considered, gateNotes(v)...)
	name := explainName(r)
	if name == "" {
		return ex
	}
	var others []Consideration
	if !strings.HasPrefix(v.Rule.Name, "deny.") && (len(p.denyHosts.exact)+len(p.denyHosts.suffix) > 0 || len(p.denyCIDRs) > 0) {
		others = append(others, Consideration{Rule: Rule{Name: "deny", Pos: p.denyPos},
			Outcome: "no [deny] host pattern or cidr matches"})
	}
	for _, c := range p.cats {
		matched := false
		for _, hr := range c.r.hosts {
			if !hostMatches(hr.pattern, name) {
				continue
			}
			matched = true
			if !seen[hr.rule.Name] {
				others = append(others, Consideration{Rule: hr.rule,
					Outcome: hr.pattern + " matches, but a more specific pattern decided"})
			}
		}
		if !matched && !seen[c.r.path] {
			others = append(others, Consideration{Rule: Rule{Name: c.r.path, Pos: c.Pos},
				Outcome: "no host pattern matches " + name})
		}
	}
	sort.SliceStable(others, func(i, j int) bool { return others[i].Rule.Name < others[j].Rule.Name })
	ex.Considered = append(ex.Considered, others...)
	return ex
}

func explainName(r Request) string {
	h := r.SNI
	if h == "" || r.Stage != StageConnect {
		h, _ = splitHostPort(r.Host)
	}
	n, err := NormalizeHost(h)
	if err != nil || strings.Contains(n, ":") || looksIPv4(n) {
		return ""
	}
	return n
}
