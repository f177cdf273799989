package audit

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"airlock/policies"
)

// sourceSections renders what the suggestion keeps from the source policy:
// its [dns] and [deny] sections, and each source category that decided
// recorded traffic, whole but for its hosts (the names seen) and its mode
// (a suggestion enforces).
func (s *suggester) sourceSections(gs []*group) (string, error) {
	if s.opt.Source == nil {
		return "", nil
	}
	var tree map[string]any
	if _, err := toml.Decode(string(s.opt.SourceText), &tree); err != nil {
		return "", fmt.Errorf("audit: source policy: %w", err)
	}
	out := map[string]any{}
	for _, k := range []string{"dns", "deny"} {
		if v, ok := tree[k]; ok {
			out[k] = v
		}
	}
	srcCats, _ := tree["categories"].(map[string]any)
	cats := map[string]any{}
	var comments strings.Builder
	for _, g := range gs {
		if !g.source {
			continue
		}
		src, _ := srcCats[g.name].(map[string]any)
		t := make(map[string]any, len(src))
		for k, v := range src {
			t[k] = v
		}
		delete(t, "mode")
		delete(t, "hosts")
		var hosts []string
		cat, _ := s.opt.Source.Category(g.name)
		for _, u := range g.hosts {
			if u.host != "" && matchesAny(cat.Hosts, u.host) {
				hosts = append(hosts, u.host)
				fmt.Fprintf(&comments, "#   categories.%s: %s (%s)\n", g.name, u.host, evidence(u))
			} else {
				fmt.Fprintf(&comments, "#   categories.%s: %s, decided by its cidrs\n", g.name, dashIfEmpty(u.host))
			}
		}
		if len(hosts) > 0 {
			t["hosts"] = hosts
		}
		cats[g.name] = t
	}
	if len(cats) > 0 {
		out["categories"] = cats
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "\n# Kept from the source policy %s: [deny], [dns] and every category that\n", s.opt.Source.File())
	b.WriteString("# decided recorded traffic, whole (kind, action, methods, routes, paths,\n# inject, packages...) with its hosts narrowed to the names seen:\n")
	b.WriteString(comments.String())
	if len(out) == 0 {
		return b.String(), nil
	}
	enc := toml.NewEncoder(&b)
	enc.Indent = ""
	if err := enc.Encode(out); err != nil {
		return "", fmt.Errorf("audit: source policy: %w", err)
	}
	return b.String(), nil
}

// routesFor lists the method and path of every allowed request to a
// group's hosts, as routes: what keeps a refused request to an allowed
// host refused when no source policy says more.
func routesFor(g *group) []string {
	byPath := map[string]map[string]bool{}
	for _, u := range g.hosts {
		for p, ms := range u.paths {
			if byPath[p] == nil {
				byPath[p] = map[string]bool{}
			}
			for m := range ms {
				byPath[p][m] = true
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var out []string
	for _, p := range paths {
		out = append(out, fmt.Sprintf("{ methods = %s, path = %s }", tomlList(slices.Sorted(maps.Keys(byPath[p]))), tomlString(p)))
	}
	return out
}

// needsRoutes: a request to one of the group's hosts was refused, so the
// methods seen alone would allow too much.
func needsRoutes(g *group) bool {
	for _, u := range g.hosts {
		if u.refusedHTTP {
			return true
		}
	}
	return false
}

// riskyAddrs reports whether any address needs the cidrs escape hatch.
func riskyAddrs(addrs map[netip.Addr]bool) string {
	for a := range addrs {
		if why := policies.CIDRRisk(netip.PrefixFrom(a, a.BitLen())); why != "" {
			return why
		}
	}
	return ""
}

// renderTests writes [[tests]]: each allowed request expects what was
// recorded, each refused one a deny.
func (s *suggester) renderTests(b *strings.Builder) {
	const maxTests = 100
	n := 0
	b.WriteString("\n# Tests: the recorded requests, and what this policy must decide for them.\n")
	for _, line := range s.order {
		if n++; n > maxTests {
			break
		}
		want := s.allowed[line]
		if u := s.hosts[s.lineHost[line]]; u.flows == 0 && u.requests == 0 {
			want = "deny" // only looked up: not allowed
		}
		fmt.Fprintf(b, "\n[[tests]]\nrequest = %s\nexpect = %s\n", tomlString(line), tomlString(want))
	}
	for _, r := range s.refused {
		if _, alsoAllowed := s.allowed[r.line]; alsoAllowed {
			continue
		}
		if n++; n > 2*maxTests {
			break
		}
		fmt.Fprintf(b, "\n[[tests]]\nname = %s\nrequest = %s\nexpect = \"deny\"\n", tomlString("refused: "+r.why), tomlString(r.line))
	}
}

// verifySuggestion: the suggestion loads, has no warnings and passes its
// own tests; anything else is a bug in Suggest, reported, not written.
func verifySuggestion(text string) error {
	p, err := policies.Parse("suggested.toml", []byte(text))
	if err != nil {
		return fmt.Errorf("audit: suggested policy does not load (please report): %w", err)
	}
	var problems []string
	for _, w := range p.Warnings() {
		problems = append(problems, "warning: "+w.Error())
	}
	for _, r := range p.RunTests() {
		if !r.Pass {
			problems = append(problems, fmt.Sprintf("%s: %s: %s", r.Case.Pos, r.Case.Line, strings.Join(r.Problems, "; ")))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return errors.New("audit: suggested policy fails its checks (please report):\n" + strings.Join(problems, "\n"))
	}
	return nil
}

// matchesAny: a name seen is added to a kept category only if one of its
// own host patterns covers it; a name it decided by cidrs alone stays so.
func matchesAny(patterns []string, host string) bool {
	for _, p := range patterns {
		if policies.HostPattern(p).Match(host) {
			return true
		}
	}
	return false
}
