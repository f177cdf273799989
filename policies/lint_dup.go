package policies

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"airlock/internal/tomlpos"
)

// duplicates: an entry that repeats another of the same list, or that an
// earlier entry already covers, says nothing; it usually hides a typo.
func (w *linter) duplicates() {
	same := func(s string) string { return s }
	qtype := func(s string) string { t, _ := ParseQType(s); return strconv.Itoa(int(t)) }
	if d := w.l.wire.DNS; d != nil {
		w.dupStrings(&d.QTypes, qtype)
		w.dupStrings(&d.Upstreams, same)
	}
	w.dupCIDRs(w.p.denyCIDRs)
	for _, c := range w.p.cats {
		wc := w.wire(c)
		for _, list := range []*strs{&wc.Methods, &wc.Sentinels, &wc.Repos, &wc.Paths} {
			w.dupStrings(list, same)
		}
		w.dupStrings(&wc.DNSTypes, qtype)
		if pm := wc.Packages; pm != nil {
			w.dupStrings(&pm.Allow, strings.ToLower)
			w.dupStrings(&pm.Deny, strings.ToLower)
		}
		w.dupCIDRs(c.r.cidrs)
		if wc.Ports.set {
			w.dupPorts(c)
		}
	}
	w.dupTests()
}

func (w *linter) dupStrings(list *strs, norm func(string) string) {
	vals, paths := list.vals, list.paths
	seen := make(map[string]string, len(vals))
	for i, v := range vals {
		k := norm(v)
		if prev, dup := seen[k]; dup {
			w.warnf(paths[i], "%q repeats %s", v, prev)
			continue
		}
		seen[k] = paths[i]
	}
}

// maxCoverCheck bounds the pairwise search for one range inside another;
// longer lists are checked for exact repeats only.
const maxCoverCheck = 2048

// dupCIDRs: rules is in file order (the loader keeps it so per list).
func (w *linter) dupCIDRs(rules []*cidrRule) {
	rs := append([]*cidrRule(nil), rules...)
	sort.SliceStable(rs, func(i, j int) bool { return before(rs[i].rule.Pos, rs[j].rule.Pos) })
	seen := make(map[netip.Prefix]string, len(rs))
	for j, r := range rs {
		if prev, dup := seen[r.prefix]; dup {
			w.warnf(r.rule.Name, "%s repeats %s", r.prefix, prev)
			continue
		}
		seen[r.prefix] = r.rule.Name
		if len(rs) > maxCoverCheck {
			continue
		}
		for _, o := range rs[:j] {
			// inside the whole world is said by the whole-world warning
			if o.prefix.Bits() > 0 && o.prefix.Bits() <= r.prefix.Bits() && o.prefix.Contains(r.prefix.Addr()) {
				w.warnf(r.rule.Name, "%s is inside %s (%s): remove one", r.prefix, o.prefix, o.rule.Name)
				break
			}
		}
	}
}

func (w *linter) dupPorts(c *Category) {
	path := tomlpos.Join(c.r.path, "ports")
	for j, r := range c.Ports {
		for i, o := range c.Ports[:j] {
			if o.Lo <= r.Lo && r.Hi <= o.Hi {
				how := "is inside"
				if o == r {
					how = "repeats"
				}
				w.warnf(tomlpos.Elem(path, j), "%s %s %s", r, how, tomlpos.Elem(path, i))
				break
			}
		}
	}
}

func (w *linter) dupTests() {
	seen := map[string]string{}
	for i, tc := range w.p.tests {
		if tc.Line == "" {
			continue
		}
		path := tomlpos.Elem("tests", i)
		if prev, dup := seen[tc.Line]; dup {
			w.warnf(tomlpos.Join(path, "request"), "%q repeats %s", tc.Line, prev)
			continue
		}
		seen[tc.Line] = path
	}
}

// ties: the same most specific pattern in two categories that decide
// differently; Decide gives each request the more restrictive verdict of
// the two, which is rarely what the author meant.
func (w *linter) ties() {
	heads := make([]*hostRule, 0)
	for _, m := range []map[string]*hostRule{w.p.hosts.exact, w.p.hosts.suffix} {
		for _, r := range m {
			if r.next != nil {
				heads = append(heads, r)
			}
		}
	}
	for _, head := range heads {
		for n := head.next; n != nil; n = n.next {
			if diff := catDiff(head.cat, n.cat); len(diff) > 0 {
				first, later := head.rule, n.rule
				if before(later.Pos, first.Pos) { // warn at the one further down the file
					first, later = later, first
				}
				w.warnf(later.Name, "%q is also in %s, and the two categories decide differently (%s): each request gets the more restrictive verdict of the two; list the host in one category",
					n.pattern, first.Name, strings.Join(diff, ", "))
			}
		}
	}
	w.cidrTies()
}

// cidrTies: a bare-address connection is decided by the first category
// (by name) whose cidrs hold the same longest prefix.
func (w *linter) cidrTies() {
	first := map[netip.Prefix]*cidrRule{}
	for _, cr := range w.p.cidrs {
		prev, ok := first[cr.prefix]
		if !ok {
			first[cr.prefix] = cr
			continue
		}
		if prev.cat != cr.cat {
			if diff := catDiff(prev.cat, cr.cat); len(diff) > 0 {
				w.warnf(cr.rule.Name, "%s is also in %s, and the two categories decide differently (%s): a connection to a bare address in it is decided by %s alone",
					cr.prefix, prev.rule.Name, strings.Join(diff, ", "), prev.cat.r.path)
			}
		}
	}
}

// catDiff names the settings in which two categories decide differently.
func catDiff(a, b *Category) []string {
	fa, fb := decisionSettings(a), decisionSettings(b)
	var out []string
	for _, k := range settingNames {
		if fa[k] != fb[k] {
			out = append(out, k)
		}
	}
	return out
}

var settingNames = []string{"kind", "mode", "action", "inspect", "http", "ports", "cidrs", "methods", "routes",
	"push", "repos", "publish", "packages", "paths", "max_body", "rate", "dns_types", "inject"}

func decisionSettings(c *Category) map[string]string {
	routes := make([]string, len(c.r.routes))
	for i, rt := range c.r.routes {
		routes[i] = fmt.Sprintf("%v %s", rt.methods, rt.path.raw)
	}
	repos := make([]string, len(c.r.repos))
	for i, rp := range c.r.repos {
		repos[i] = rp.owner + "/" + rp.repo
	}
	var pkgs []string
	for _, pp := range c.r.pkgAllow {
		pkgs = append(pkgs, "allow "+pp.raw)
	}
	for _, pp := range c.r.pkgDeny {
		pkgs = append(pkgs, "deny "+pp.raw)
	}
	paths := make([]string, 0, len(c.r.paths))
	for p := range c.r.paths {
		paths = append(paths, p)
	}
	methods := append([]string(nil), c.Methods...)
	for _, l := range [][]string{paths, methods} {
		sort.Strings(l)
	}
	return map[string]string{
		"kind": c.Kind.String(), "mode": c.Mode.String(), "action": c.Action.String(),
		"inspect": strconv.FormatBool(c.Inspect), "http": strconv.FormatBool(c.HTTP),
		"ports": fmt.Sprint(c.Ports), "cidrs": fmt.Sprint(c.CIDRs), "methods": strings.Join(methods, ","),
		"routes": strings.Join(routes, ";"), "push": strconv.FormatBool(c.r.push), "repos": strings.Join(repos, ","),
		"publish": strconv.FormatBool(c.r.publish), "packages": strings.Join(pkgs, ","), "paths": strings.Join(paths, ","),
		"max_body": strconv.FormatInt(c.MaxBody, 10), "rate": fmt.Sprint(c.Rate), "dns_types": fmt.Sprint(c.DNSTypes),
		"inject": injectString(c.Inject),
	}
}

func injectString(in *Inject) string {
	if in == nil {
		return ""
	}
	return in.Header + " " + in.Secret + " " + in.Format
}

func before(a, b Position) bool { return a.Line < b.Line || a.Line == b.Line && a.Col < b.Col }
