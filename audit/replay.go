package audit

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"airlock/policies"
)

// RequestOf is the policy request a recorded dns, flow decision or http
// event was decided on; ok is false for every other record.
func RequestOf(e *Event) (policies.Request, bool) {
	switch {
	case e.DNS != nil:
		qt, ok := policies.ParseQType(e.DNS.QType)
		if !ok {
			return policies.Request{}, false
		}
		return policies.Request{Stage: policies.StageDNS, Host: e.DNS.QName, QType: qt}, true
	case e.Flow != nil && e.Flow.Stage == "decision":
		return connectRequest(e.Flow), true
	case e.HTTP != nil:
		return httpRequest(e.HTTP), true
	}
	return policies.Request{}, false
}

func connectRequest(f *Flow) policies.Request {
	r := policies.Request{Stage: policies.StageConnect, Host: firstNonEmpty(f.Host, f.SNI), SNI: f.SNI}
	for _, s := range []string{f.Dialed, f.OrigDst} {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			r.IP, r.Port = ap.Addr().Unmap(), ap.Port()
			break
		}
	}
	if r.Host == "" && r.IP.IsValid() {
		r.Host = r.IP.String()
	}
	if r.Port == 0 {
		r.Port = 443
	}
	return r
}

func httpRequest(h *HTTP) policies.Request {
	r := policies.Request{Stage: policies.StageHTTP, Method: h.Method, Scheme: h.Scheme, Host: hostOnly(h.Host),
		Path: h.Path, Query: h.Query, Port: defaultPort(h.Scheme)}
	if _, p, ok := strings.Cut(strings.TrimPrefix(h.Host, "["), "]:"); ok {
		r.Port = parsePort(p, r.Port)
	} else if i := strings.LastIndexByte(h.Host, ':'); i > 0 && strings.Count(h.Host, ":") == 1 {
		r.Port = parsePort(h.Host[i+1:], r.Port)
	}
	if h.Package != nil {
		r.Package = &policies.Package{Ecosystem: h.Package.Ecosystem, Name: h.Package.Name, Version: h.Package.Version}
	}
	return r
}

func defaultPort(scheme string) uint16 {
	if scheme == "http" {
		return 80
	}
	return 443
}

func parsePort(s string, def uint16) uint16 {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return def
	}
	return uint16(n)
}

// DescribeRequest writes a request the way `airlock policy explain` reads
// it: "dns NAME TYPE", "connect HOST:PORT", "GET https://host/path".
func DescribeRequest(r policies.Request) string {
	switch r.Stage {
	case policies.StageDNS:
		return "dns " + r.Host + " " + policies.QTypeString(r.QType)
	case policies.StageConnect:
		s := "connect " + r.Host + ":" + strconv.Itoa(int(r.Port))
		if r.IP.IsValid() && r.IP.String() != r.Host {
			s += " ip=" + r.IP.String()
		}
		return s
	}
	host := r.Host
	if r.Port != 0 && r.Port != defaultPort(r.Scheme) {
		host += ":" + strconv.Itoa(int(r.Port))
	}
	s := r.Method + " " + r.Scheme + "://" + host + r.Path
	if r.Query != "" {
		s += "?" + r.Query
	}
	return s
}

// Outcome is what a verdict means for the request: let through, refused
// (or would be refused in audit mode), or held for a human.
type Outcome string

const (
	OutcomeAllowed Outcome = "allowed"
	OutcomeDenied  Outcome = "denied"
	OutcomeAsk     Outcome = "ask"
)

func outcomeOf(v policies.Verdict) Outcome {
	switch {
	case v.Action == policies.ActionAsk:
		return OutcomeAsk
	case v.Action == policies.ActionDeny || v.WouldDeny:
		return OutcomeDenied
	}
	return OutcomeAllowed
}

func recordedOutcome(e *Event) Outcome {
	switch {
	case e.Verdict == "ask":
		return OutcomeAsk
	case e.Verdict == "deny" || e.WouldDeny:
		return OutcomeDenied
	}
	return OutcomeAllowed
}

// Change is one recorded request whose outcome differs under the candidate
// policy; identical requests are counted together.
type Change struct {
	Request   string    `json:"request"`
	Sandboxes []string  `json:"sandboxes"`
	First     time.Time `json:"first"`
	Count     int       `json:"count"`
	Old       Outcome   `json:"old"`
	New       Outcome   `json:"new"`
	OldRule   string    `json:"old_rule"`
	NewRule   string    `json:"new_rule"`
	NewReason string    `json:"new_reason"`
}

// ReplayResult is the difference a candidate policy makes on recorded
// requests.
type ReplayResult struct {
	Decided      int      `json:"decided"` // recorded requests decided again
	NewlyDenied  []Change `json:"newly_denied"`
	NewlyAllowed []Change `json:"newly_allowed"`
	NewlyAsked   []Change `json:"newly_asked"` // any other change involving ask
}

// Changed reports whether any outcome differs.
func (r *ReplayResult) Changed() bool {
	return len(r.NewlyDenied)+len(r.NewlyAllowed)+len(r.NewlyAsked) > 0
}

// Replay decides the recorded dns, flow and http requests matching q again
// under candidate. The old outcome is the recorded verdict, or baseline's
// verdict when baseline is not nil (to compare two policies).
func Replay(ctx context.Context, st *Store, q Query, candidate, baseline *policies.Policy) (*ReplayResult, error) {
	res := &ReplayResult{}
	changes := map[string]*Change{}
	var order []string
	err := st.Each(ctx, q, func(e Event) error {
		req, ok := RequestOf(&e)
		if !ok {
			return nil
		}
		res.Decided++
		old, oldRule := recordedOutcome(&e), e.Rule
		if baseline != nil {
			bv := baseline.Decide(req)
			old, oldRule = outcomeOf(bv), bv.Rule.String()
		}
		nv := candidate.Decide(req)
		if outcomeOf(nv) == old {
			return nil
		}
		key := DescribeRequest(req) + "|" + string(old)
		c := changes[key]
		if c == nil {
			c = &Change{Request: DescribeRequest(req), First: e.Time, Old: old, New: outcomeOf(nv),
				OldRule: oldRule, NewRule: nv.Rule.String(), NewReason: nv.Reason}
			changes[key] = c
			order = append(order, key)
		}
		c.Count++
		if e.Sandbox != "" && !contains(c.Sandboxes, e.Sandbox) {
			c.Sandboxes = append(c.Sandboxes, e.Sandbox)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, k := range order {
		c := *changes[k]
		switch {
		case c.New == OutcomeDenied:
			res.NewlyDenied = append(res.NewlyDenied, c)
		case c.New == OutcomeAllowed && c.Old == OutcomeDenied:
			res.NewlyAllowed = append(res.NewlyAllowed, c)
		default:
			res.NewlyAsked = append(res.NewlyAsked, c)
		}
	}
	for _, l := range [][]Change{res.NewlyDenied, res.NewlyAllowed, res.NewlyAsked} {
		sort.SliceStable(l, func(i, j int) bool { return l[i].Count > l[j].Count })
	}
	return res, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// String renders a change for people.
func (c Change) String() string {
	return fmt.Sprintf("%s  (x%d, %s -> %s by %s: %s; was %s)", c.Request, c.Count, c.Old, c.New, c.NewRule, c.NewReason, dashIfEmpty(c.OldRule))
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
