package dnsd

import (
	"strings"
	"sync"
	"time"

	"golang.org/x/net/publicsuffix"
	"golang.org/x/time/rate"
)

// Guard reasons, as they appear in events (audit.DNS.Guard) and in the
// rule name "dns.<reason>".
const (
	GuardLabelLength = "max_label"
	GuardNameLength  = "max_name"
	GuardRate        = "queries_per_minute"
	GuardRateSecond  = "queries_per_second"
	GuardParent      = "names_per_parent"
)

// guardText is the Extended DNS Error text of each guard's denial.
var guardText = map[string]string{
	GuardLabelLength: "exfiltration guard: " + GuardLabelLength,
	GuardNameLength:  "exfiltration guard: " + GuardNameLength,
	GuardRate:        "exfiltration guard: " + GuardRate,
	GuardRateSecond:  "exfiltration guard: " + GuardRateSecond,
	GuardParent:      "exfiltration guard: " + GuardParent,
}

const (
	guardWindow      = time.Minute
	maxParentsPerBox = 4096 // parent domains tracked per sandbox per window
)

// guards holds per-sandbox exfiltration state. Each sandbox has its own
// lock, so a sandbox tripping a guard never waits on another.
type guards struct {
	boxes sync.Map // sandbox ID -> *boxGuard
}

type boxGuard struct {
	mu       sync.Mutex
	limiter  *rate.Limiter // queries_per_minute
	qpm      int
	perSec   *rate.Limiter // queries_per_second
	qps      int
	window   time.Time                      // start of the names-per-parent window
	parents  map[string]map[string]struct{} // parent -> distinct names this window
	lastSeen time.Time
}

func (g *guards) box(id string) *boxGuard {
	if b, ok := g.boxes.Load(id); ok {
		return b.(*boxGuard)
	}
	b, _ := g.boxes.LoadOrStore(id, &boxGuard{})
	return b.(*boxGuard)
}

// sweep forgets sandboxes idle for longer than a window.
func (g *guards) sweep(now time.Time) {
	g.boxes.Range(func(k, v any) bool {
		b := v.(*boxGuard)
		b.mu.Lock()
		idle := now.Sub(b.lastSeen) > 2*guardWindow
		b.mu.Unlock()
		if idle {
			g.boxes.Delete(k)
		}
		return true
	})
}

// guardStep applies the policy's [dns] limits; a tripped guard denies the
// query with the policy's block answer.
func (s *Server) guardStep(q *query) outcome {
	cfg := q.sb.Policy.DNS()
	q.guard = checkLengths(q.name, cfg.MaxLabel, cfg.MaxName)
	if q.guard == "" {
		q.guard, q.guardScope = s.guards.box(q.sb.ID).check(q.name, limits{qpm: cfg.QueriesPerMinute, qps: cfg.QueriesPerSecond, perParent: cfg.NamesPerParent}, q.start)
	}
	if q.guard == "" {
		return next
	}
	q.resp = s.blockAnswer(q, guardText[q.guard])
	return answer
}

// checkLengths enforces label and name length limits (defaults 63 and 253).
// It walks the labels in place: it runs on every query.
func checkLengths(name string, maxLabel, maxName int) string {
	if maxLabel <= 0 {
		maxLabel = 63
	}
	if maxName <= 0 {
		maxName = 253
	}
	name = strings.TrimSuffix(name, ".")
	if len(name) > maxName {
		return GuardNameLength
	}
	for name != "" {
		end := strings.IndexByte(name, '.')
		if end < 0 {
			end = len(name)
		}
		if end > maxLabel {
			return GuardLabelLength
		}
		name = name[min(end+1, len(name)):]
	}
	return ""
}

// limits are a policy's per-sandbox counters; 0 means unlimited.
type limits struct{ qpm, qps, perParent int }

// check counts the query against the sandbox's rate and per-parent
// limits. It returns the guard that tripped ("" if none) and, for
// names_per_parent, the parent whose names it counted. A query denied by
// one cap is not counted against the caps after it.
func (b *boxGuard) check(name string, lim limits, now time.Time) (string, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastSeen = now
	if lim.qps > 0 {
		if b.perSec == nil || b.qps != lim.qps {
			b.perSec = rate.NewLimiter(rate.Limit(lim.qps), lim.qps)
			b.qps = lim.qps
		}
		if !b.perSec.AllowN(now, 1) {
			return GuardRateSecond, ""
		}
	}
	if lim.qpm > 0 {
		if b.limiter == nil || b.qpm != lim.qpm {
			b.limiter = rate.NewLimiter(rate.Limit(float64(lim.qpm)/60), lim.qpm)
			b.qpm = lim.qpm
		}
		if !b.limiter.AllowN(now, 1) {
			return GuardRate, ""
		}
	}
	perParent := lim.perParent
	if perParent <= 0 {
		return "", ""
	}
	if now.Sub(b.window) >= guardWindow || b.parents == nil {
		b.window, b.parents = now, make(map[string]map[string]struct{})
	}
	if p := b.countChildren(name, perParent); p != "" {
		return GuardParent, p
	}
	return "", ""
}

// The scope of names_per_parent. An exfiltration stream puts its data in
// the labels below some parent it controls ("<data>.pkg.example.test"),
// so the guard counts, for every ancestor of the queried name from the
// immediate parent up to the registrable domain (public suffix + 1), the
// distinct child labels seen under it this window. A stream trips the
// ancestor whose children it varies — "pkg.example.test" for
// "<data>.pkg.example.test", and also for "<data>.<data>.pkg.example.test",
// whose immediate parents are all new — and only names that would add a
// new child under that ancestor are denied: "registry.example.test" adds
// just one child ("registry") under "example.test" and still resolves, and
// names already seen under the tripped parent keep resolving. Counting over
// the whole registrable domain (as before) let one stream deny every
// sibling; counting only the immediate parent let a stream varying two
// labels escape. Ancestors above the registrable domain (public suffixes
// such as "co.uk") are never counted: their children are unrelated owners.
func (b *boxGuard) countChildren(name string, perParent int) string {
	var buf [8]level
	levels := parentLevels(strings.TrimSuffix(name, "."), buf[:0])
	// Check every level before recording any, so a denied name counts nowhere.
	for _, lv := range levels {
		kids := b.parents[lv.parent]
		if _, seen := kids[lv.child]; seen {
			continue
		}
		if kids == nil && len(b.parents) >= maxParentsPerBox {
			return lv.parent // fail closed when the table is full
		}
		if len(kids) >= perParent {
			return lv.parent
		}
	}
	for _, lv := range levels {
		kids := b.parents[lv.parent]
		if kids == nil {
			kids = make(map[string]struct{})
			b.parents[lv.parent] = kids
		}
		kids[lv.child] = struct{}{}
	}
	return ""
}

// level is one ancestor of a name and the label of the name's path just
// below it.
type level struct{ parent, child string }

// parentLevels lists the ancestors of name (no trailing dot) from the
// immediate parent up to its registrable domain, with the child label
// under each: "a.b.pkg.example.test" gives (b.pkg.example.test, a),
// (pkg.example.test, b), (example.test, pkg). A name that is itself a
// registrable domain or public suffix has none. They are appended to out.
func parentLevels(name string, out []level) []level {
	top, err := publicsuffix.EffectiveTLDPlusOne(name)
	if err != nil || len(top) >= len(name) {
		return out
	}
	for rest := name; len(rest) > len(top); {
		dot := strings.IndexByte(rest, '.')
		if dot < 0 {
			break
		}
		out = append(out, level{parent: rest[dot+1:], child: rest[:dot]})
		rest = rest[dot+1:]
	}
	return out
}
