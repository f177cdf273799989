package audit

import (
	"net/netip"
	"sort"
)

// Egress is a sandbox's distinct recorded requests (DNS questions,
// connections, HTTP requests, as DescribeRequest names them without the
// dialed address, which may change between runs) and their outcomes.
type Egress map[string]Outcome

// Add records e when it is a decided request. A request seen with two
// outcomes keeps the stricter (denied over ask over allowed).
func (g Egress) Add(e *Event) {
	r, ok := RequestOf(e)
	if !ok {
		return
	}
	r.IP = netip.Addr{}
	k, o := DescribeRequest(r), recordedOutcome(e)
	if old, seen := g[k]; !seen || strictness(o) > strictness(old) {
		g[k] = o
	}
}

func strictness(o Outcome) int {
	switch o {
	case OutcomeDenied:
		return 2
	case OutcomeAsk:
		return 1
	}
	return 0
}

// EgressChange is a request one run made and the other did not, or made
// with another outcome; Old or New is "" where it was not made.
type EgressChange struct {
	Request string  `json:"request"`
	Old     Outcome `json:"old"`
	New     Outcome `json:"new"`
}

// DiffEgress lists the requests whose outcome differs between old and
// new, by request.
func DiffEgress(old, new Egress) []EgressChange {
	var out []EgressChange
	for k, o := range old {
		if n := new[k]; n != o {
			out = append(out, EgressChange{Request: k, Old: o, New: n})
		}
	}
	for k, n := range new {
		if _, ok := old[k]; !ok {
			out = append(out, EgressChange{Request: k, New: n})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Request < out[j].Request })
	return out
}
