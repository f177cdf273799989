package serve

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"airlock/audit"
	"airlock/client"
)

// tap sees every event on its way to the audit pipeline: it feeds the
// metrics, keeps each sandbox's egress summary (bounded) and remembers the
// command each sandbox is running (for approvals).
type tap struct {
	next    audit.Emitter
	metrics *Metrics
	// enrich, when set, may fill in fields producers cannot know (the
	// policy hash of a lifecycle record) before e is recorded.
	enrich func(e *audit.Event)

	mu      sync.Mutex
	sums    map[string]*summary
	order   []string // sandboxes in the order their summary was made
	running map[string]string
}

const (
	maxSummaryDests  = 50
	maxSummaryDenied = 200
	maxSummaryNames  = 500
	// maxSummaries bounds how many sandboxes' summaries are kept; the
	// oldest go first (the audit store keeps everything).
	maxSummaries = 1000
)

type summary struct {
	cats   map[string]*catCount
	denied map[deniedKey]*client.DeniedAttempt
	names  map[string]bool
	drops  uint64
	counts map[string]uint64
}

type catCount struct {
	requests uint64
	dests    map[string]bool
}

type deniedKey struct{ dest, kind, rule string }

func newTap(next audit.Emitter, m *Metrics) *tap {
	return &tap{next: next, metrics: m, sums: map[string]*summary{}, running: map[string]string{}}
}

// Emit observes e and passes it on (audit.Emitter).
func (t *tap) Emit(e audit.Event) {
	if t.enrich != nil {
		t.enrich(&e)
	}
	t.mu.Lock()
	if t.metrics != nil {
		t.metrics.observe(&e)
	}
	if e.Sandbox != "" {
		t.observe(&e)
	}
	t.mu.Unlock()
	t.next.Emit(e)
}

func (t *tap) sum(id string) *summary {
	s := t.sums[id]
	if s == nil {
		s = &summary{cats: map[string]*catCount{}, denied: map[deniedKey]*client.DeniedAttempt{},
			names: map[string]bool{}, counts: map[string]uint64{}}
		t.sums[id] = s
		t.order = append(t.order, id)
		for len(t.order) > maxSummaries {
			delete(t.sums, t.order[0])
			t.order = t.order[1:]
		}
	}
	return s
}

func (t *tap) observe(e *audit.Event) {
	if e.Kind == audit.KindExec && e.Exec != nil {
		switch e.Exec.Stage {
		case "started":
			t.running[e.Sandbox] = strings.Join(e.Exec.Argv, " ")
		case "finished":
			delete(t.running, e.Sandbox)
		}
	}
	if e.Kind == audit.KindLifecycle && e.Lifecycle != nil && e.Lifecycle.Stage == "destroyed" {
		delete(t.running, e.Sandbox)
	}
	s := t.sum(e.Sandbox)
	s.counts[string(e.Kind)]++
	host := audit.Host(e)
	switch e.Kind {
	case audit.KindDNS:
		if len(s.names) < maxSummaryNames && host != "" {
			s.names[host] = true
		}
	case audit.KindDrop:
		s.drops += dropCount(e)
		host = fmt.Sprintf("%s %s:%d", e.Drop.Protocol, e.Drop.Dest, e.Drop.Port)
	case audit.KindFlow:
		if e.Flow != nil && e.Flow.Stage != "decision" {
			return
		}
	case audit.KindHTTP:
	default:
		return
	}
	if e.Verdict == "deny" || e.WouldDeny {
		s.addDenied(deniedKey{host, string(e.Kind), e.Rule}, e.Reason)
		return
	}
	if e.Kind == audit.KindFlow || e.Kind == audit.KindHTTP {
		s.addAllowed(e.Category, host)
	}
}

func (s *summary) addDenied(k deniedKey, reason string) {
	if d, ok := s.denied[k]; ok {
		d.Count++
		return
	}
	if len(s.denied) >= maxSummaryDenied {
		return
	}
	s.denied[k] = &client.DeniedAttempt{Destination: k.dest, Kind: k.kind, Rule: k.rule, Reason: reason, Count: 1}
}

func (s *summary) addAllowed(cat, host string) {
	if cat == "" {
		cat = "(none)"
	}
	c := s.cats[cat]
	if c == nil {
		c = &catCount{dests: map[string]bool{}}
		s.cats[cat] = c
	}
	c.requests++
	if len(c.dests) < maxSummaryDests && host != "" {
		c.dests[host] = true
	}
}

// Summary returns a sandbox's egress summary so far.
func (t *tap) Summary(id string) client.Summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := client.Summary{Sandbox: id}
	s, ok := t.sums[id]
	if !ok {
		return out
	}
	for name, c := range s.cats {
		dests := slices.AppendSeq(make([]string, 0, len(c.dests)), maps.Keys(c.dests)) // [] in JSON when none
		slices.Sort(dests)
		out.Categories = append(out.Categories, client.CategoryCount{Category: name, Requests: c.requests, Destinations: dests})
	}
	sort.Slice(out.Categories, func(i, j int) bool { return out.Categories[i].Category < out.Categories[j].Category })
	for _, d := range s.denied {
		out.Denied = append(out.Denied, *d)
	}
	sort.Slice(out.Denied, func(i, j int) bool {
		if out.Denied[i].Kind != out.Denied[j].Kind {
			return out.Denied[i].Kind < out.Denied[j].Kind
		}
		return out.Denied[i].Destination < out.Denied[j].Destination
	})
	out.DNSNames = slices.Sorted(maps.Keys(s.names))
	out.Drops = s.drops
	out.Counts = make(map[string]uint64, len(s.counts))
	for k, v := range s.counts {
		out.Counts[k] = v
	}
	return out
}

// Running names the command a sandbox is running now ("" if none).
func (t *tap) Running(id string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.running[id]
}

// Forget drops a sandbox's summary (some time after it is destroyed).
func (t *tap) Forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.sums, id)
	delete(t.running, id)
}
