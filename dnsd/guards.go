package dnsd

import (
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/publicsuffix"
	"golang.org/x/time/rate"
)

// Guard reasons, as they appear in events (audit.DNS.Guard) and in the
// rule name "dns.<reason>".
const (
	GuardLabelLength = "max_label"
	GuardNameLength  = "max_name"
	GuardRate        = "queries_per_minute"
	GuardParent      = "names_per_parent"
)

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
	limiter  *rate.Limiter
	qpm      int
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
func (s *Server) guardStep(q *query) bool {
	cfg := q.sb.Policy.DNS()
	q.guard = checkLengths(q.name, cfg.MaxLabel, cfg.MaxName)
	if q.guard == "" {
		q.guard = s.guards.box(q.sb.ID).check(q.name, cfg.QueriesPerMinute, cfg.NamesPerParent, time.Now())
	}
	if q.guard == "" {
		return true
	}
	q.resp = s.blockAnswer(q, "exfiltration guard: "+q.guard)
	return false
}

// checkLengths enforces label and name length limits (defaults 63 and 253).
func checkLengths(name string, maxLabel, maxName int) string {
	if maxLabel <= 0 {
		maxLabel = 63
	}
	if maxName <= 0 {
		maxName = 253
	}
	if len(strings.TrimSuffix(name, ".")) > maxName {
		return GuardNameLength
	}
	for _, off := range dns.Split(name) {
		end := strings.IndexByte(name[off:], '.')
		if end < 0 {
			end = len(name) - off
		}
		if end > maxLabel {
			return GuardLabelLength
		}
	}
	return ""
}

// check counts the query against the sandbox's rate and per-parent limits.
func (b *boxGuard) check(name string, qpm, perParent int, now time.Time) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastSeen = now
	if qpm > 0 {
		if b.limiter == nil || b.qpm != qpm {
			b.limiter = rate.NewLimiter(rate.Limit(float64(qpm)/60), qpm)
			b.qpm = qpm
		}
		if !b.limiter.AllowN(now, 1) {
			return GuardRate
		}
	}
	if perParent <= 0 {
		return ""
	}
	if now.Sub(b.window) >= guardWindow || b.parents == nil {
		b.window, b.parents = now, make(map[string]map[string]struct{})
	}
	p := parentOf(name)
	names := b.parents[p]
	if names == nil {
		if len(b.parents) >= maxParentsPerBox {
			return GuardParent
		}
		names = make(map[string]struct{})
		b.parents[p] = names
	}
	if _, seen := names[name]; seen {
		return ""
	}
	if len(names) >= perParent {
		return GuardParent
	}
	names[name] = struct{}{}
	return ""
}

// parentOf is the registrable domain of name (public suffix + 1), so
// "a.b.evil.test." and "c.d.evil.test." share the parent "evil.test".
func parentOf(name string) string {
	n := strings.TrimSuffix(name, ".")
	if p, err := publicsuffix.EffectiveTLDPlusOne(n); err == nil {
		return p
	}
	return n
}
