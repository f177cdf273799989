package policies

import (
	"fmt"
	"sort"
	"strings"

	"airlock/internal/tomlpos"
)

// routes: a route allowing a method its category never allows, and a
// route an earlier route always matches first, can never decide.
func (w *linter) routes(c *Category) {
	wroutes := w.wire(c).routes
	if len(wroutes) != len(c.r.routes) { // the loader refused some; nothing to align
		return
	}
	path := tomlpos.Join(c.r.path, "routes")
	for j := range c.r.routes {
		rt, ep := &c.r.routes[j], tomlpos.Elem(path, j)
		ms, mpaths := wroutes[j].Methods.vals, wroutes[j].Methods.paths
		for i, m := range ms {
			if m != "*" && !c.r.methods.has(m) {
				w.warnf(mpaths[i], "the route allows %s, which %s never allows: it never matches a %s request",
					m, tomlpos.Join(c.r.path, "methods"), m)
			}
		}
		for i := range c.r.routes[:j] {
			if routeCovers(&c.r.routes[i], rt) {
				w.warnf(ep, "can never match: %s comes first and matches every request this route would", tomlpos.Elem(path, i))
				break
			}
		}
	}
}

// routeCovers reports whether route a matches every request route b does.
func routeCovers(a, b *route) bool {
	return methodsCover(&a.methods, &b.methods) && pathCovers(&a.path, &b.path)
}

func methodsCover(a, b *methodSet) bool {
	if a.any {
		return true
	}
	if b.any || b.bits&^a.bits != 0 {
		return false
	}
	for _, m := range b.other {
		if !contains(a.other, m) {
			return false
		}
	}
	return true
}

// pathCovers reports whether pattern a matches every path pattern b does.
func pathCovers(a, b *pathPattern) bool {
	if a.rest {
		if len(a.segs) > len(b.segs) {
			return false
		}
		for _, s := range b.segs[len(a.segs):] {
			if hasEncodedSep(s) {
				return false
			}
		}
	} else if b.rest || len(a.segs) != len(b.segs) {
		return false
	}
	for i, s := range a.segs {
		if !segCovers(s, b.segs[i]) {
			return false
		}
	}
	return true
}

func segCovers(a, b string) bool {
	return a == b || a == "*" && b != "" && !hasEncodedSep(b)
}

// fixedRules are rule names that exist in every policy.
var fixedRules = []string{"default", "mode", "dns.qtypes", "dns.max_label", "dns.max_name"}

// tests: a [[tests]] entry naming a rule or category that does not exist
// can never pass, and says nothing about the policy.
func (w *linter) tests() {
	for i, tc := range w.p.tests {
		path := tomlpos.Elem("tests", i)
		if tc.Rule != "" && !w.ruleExists(tc.Rule) {
			w.warnf(tomlpos.Join(path, "rule"), "no rule is named %q%s: the test can never pass", tc.Rule, didYouMean(tc.Rule, w.ruleNames()))
		}
		if _, ok := w.p.catByName[tc.Category]; tc.Category != "" && !ok {
			names := make([]string, len(w.p.cats))
			for i, c := range w.p.cats {
				names[i] = c.Name
			}
			w.warnf(tomlpos.Join(path, "category"), "no category is named %q%s: the test can never pass", tc.Category, didYouMean(tc.Category, names))
		}
	}
}

func didYouMean(s string, names []string) string {
	if c := tomlpos.Closest(s, names); c != "" {
		return fmt.Sprintf(" (did you mean %q?)", c)
	}
	return ""
}

func ruleBase(name string) bool {
	return strings.HasPrefix(name, "categories.") || strings.HasPrefix(name, "deny.") || strings.HasPrefix(name, "dns.")
}

// ruleExists reports whether a verdict can name this rule: a fixed rule, a
// key or list element written in the file, or any key its category may
// have (an unwritten default such as categories.git.push decides too).
func (w *linter) ruleExists(name string) bool {
	if contains(fixedRules, name) {
		return true
	}
	if !ruleBase(name) {
		return false
	}
	if w.l.ix.Has(name) {
		return true
	}
	if open := strings.LastIndexByte(name, '['); open > 0 && strings.HasSuffix(name, "]") {
		return false // an element not written
	}
	parent := tomlpos.Parent(name)
	key := strings.TrimPrefix(name, parent+".")
	if c := w.catByPath(parent); c != nil {
		return contains(categoryKeys(c.Kind), key)
	}
	if c := w.catByPath(tomlpos.Parent(parent)); c != nil && strings.HasSuffix(parent, ".packages") {
		return c.Kind == KindRegistries && (key == "allow" || key == "deny")
	}
	return false
}

func (w *linter) catByPath(path string) *Category {
	for _, c := range w.p.cats {
		if c.r.path == path {
			return c
		}
	}
	return nil
}

// maxRuleNames bounds the names a did-you-mean looks through.
const maxRuleNames = 10000

// ruleNames lists rule names for a did-you-mean.
func (w *linter) ruleNames() []string {
	names := append([]string{}, fixedRules...)
	for _, c := range w.p.cats {
		for _, k := range categoryKeys(c.Kind) {
			names = append(names, tomlpos.Join(c.r.path, k))
		}
	}
	for base, n := range w.l.ix.Arrays {
		for i := 0; i < n && ruleBase(base) && len(names) < maxRuleNames; i++ {
			names = append(names, tomlpos.Elem(base, i))
		}
	}
	for k := range w.l.ix.Keys {
		if ruleBase(k) && len(names) < maxRuleNames {
			names = append(names, k)
		}
	}
	sort.Strings(names) // a did-you-mean must not depend on map order
	return names
}
