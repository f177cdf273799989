package policies

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"airlock/internal/tomlpos"
)

// catRules is the compiled per-request part of a category.
type catRules struct {
	path         string // "categories.git"
	actionRule   Rule
	hosts        []*hostRule
	cidrs        []*cidrRule
	cidrsRule    Rule
	portsRule    Rule
	portsReason  string
	httpRule     Rule
	methods      methodSet
	methodsRule  Rule
	methodsWhy   string
	routes       []route
	routesRule   Rule
	push         bool
	pushRule     Rule
	repos        []repoPattern
	reposRule    Rule
	publish      bool
	publishRule  Rule
	pkgAllow     []pkgPattern
	pkgDeny      []pkgPattern
	pkgAllowEco  map[string]Rule // ecosystems with an allow list
	pkgRule      Rule            // categories.NAME.packages: an unrecognized path
	prefixes     []string        // path_prefix: where packages sit on the registry
	gate         *PackageGate    // release age and install scripts, nil when none
	lock         *LockSet        // lockfiles: the versions allowed, nil when none
	unrecognized string          // the reason an unrecognized path is denied
	allowDoH     bool
	allowDoHRule Rule
	paths        map[string]Rule // webhooks: exact paths
	pathsRule    Rule
	// reasons precomputed so Decide does not allocate
	denyReason, qtypeReason, addrReason, askReason string
}

// PortRange is an inclusive range of TCP ports.
type PortRange struct{ Lo, Hi uint16 }

func (r PortRange) String() string {
	if r.Lo == r.Hi {
		return strconv.Itoa(int(r.Lo))
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}

type route struct {
	methods methodSet
	path    pathPattern
	rule    Rule
	reason  string
}

var kindByName = map[string]Kind{
	"registries": KindRegistries, "git": KindGit, "internal_api": KindInternalAPI,
	"webhooks": KindWebhooks, "public_web": KindPublicWeb,
}

var kindList = []string{"registries", "git", "internal_api", "webhooks", "public_web"}

// categoryKeys are the keys a category of kind k reads (the lints' keys
// aside), in wireCategory's order.
func categoryKeys(k Kind) []string {
	fs := fieldsOf(reflect.TypeFor[wireCategory]())
	var out []string
	for _, n := range fs.Names {
		if kk := kindOf(fs, n); kk == "" || kk == k.String() {
			out = append(out, n)
		}
	}
	return out
}

// lintKeys are category keys only the lints read.
func lintKeys() []string {
	fs := fieldsOf(reflect.TypeFor[wireCategory]())
	var out []string
	for _, n := range fs.Names {
		if kindOf(fs, n) == "lint" {
			out = append(out, n)
		}
	}
	return out
}

func (l *loader) category(p *Policy, name, path string, m map[string]any) *Category {
	c := &Category{Name: name, Pos: l.pos(path)}
	c.r.path = path
	c.Kind = l.kind(name, path, m)
	fs := fieldsOf(reflect.TypeFor[wireCategory]())
	for _, key := range fs.Names {
		if k := kindOf(fs, key); k != "" && k != "lint" && k != c.Kind.String() {
			if _, ok := m[key]; ok {
				l.errf(tomlpos.Join(path, key), "%s only applies to %s categories (this one is %s)", key, k, kindLabel(c.Kind))
				delete(m, key) // reported; not "unknown" too
			}
		}
	}
	w := &wireCategory{}
	l.wireCats[c] = w
	l.decode(m, path, w, append(categoryKeys(c.Kind), lintKeys()...))
	c.Mode = p.mode
	if w.Mode != nil {
		c.Mode = Mode(*w.Mode)
	}
	c.Action = ActionAllow
	if w.Action != nil {
		c.Action = Action(*w.Action)
	}
	c.r.actionRule = l.rule(tomlpos.Join(path, "action"))
	c.r.denyReason = "category " + name + " denies its hosts (" + path + ".action = \"deny\")"
	c.r.qtypeReason = "query type is in neither dns.qtypes nor " + path + ".dns_types"
	c.r.addrReason = "address is not public and not in " + path + ".cidrs"
	c.r.askReason = "category " + name + " asks: the connection opens and each request waits for approval"
	c.Inspect = flag(w.Inspect, true)
	c.HTTP = flag(w.HTTP, false)
	c.r.httpRule = l.rule(tomlpos.Join(path, "http"))
	c.LogQuery = flag(w.LogQuery, false)
	c.SentinelBody = flag(w.SentinelBody, false)
	c.r.allowDoH = flag(w.AllowDoH, false)
	c.r.allowDoHRule = l.rule(tomlpos.Join(path, "allow_doh"))
	l.catHosts(c, &w.Hosts)
	c.r.cidrs = l.cidrs(&w.CIDRs)
	c.r.cidrsRule = l.rule(tomlpos.Join(path, "cidrs"))
	for _, cr := range c.r.cidrs {
		cr.cat = c
		cr.reason = "address is in " + cr.prefix.String() + " (" + path + ".cidrs)"
		c.CIDRs = append(c.CIDRs, cr.prefix)
	}
	switch {
	case !w.Hosts.set && !w.CIDRs.set:
		l.errf(path, "a category needs hosts or cidrs")
	case isEmptyList(m["hosts"]) && isEmptyList(m["cidrs"]):
		l.errf(path, "hosts and cidrs are empty: the category covers nothing")
	}
	l.ports(c, &w.Ports)
	l.methods(c, &w.Methods)
	l.routes(c, w)
	l.inject(c, w.Inject)
	if w.Sentinels.set {
		for i, n := range w.Sentinels.vals {
			if !validSecretName(n) {
				l.errf(w.Sentinels.paths[i], "%q is not a secret name (letters, digits, '_', '-', '.')", n)
			}
		}
		c.Sentinels = w.Sentinels.vals
	}
	l.sentinelHeaders(c, &w.SentinelHeaders, path)
	if w.DNSTypes.set {
		c.DNSTypes = l.qtypes(&w.DNSTypes)
	}
	switch c.Kind {
	case KindGit:
		l.gitKeys(c, w)
	case KindRegistries:
		l.registryKeys(c, w)
		l.gateKeys(c, w)
		l.lockfiles(c, &w.Lockfiles)
	case KindWebhooks:
		l.webhookKeys(c, w)
	case KindInternalAPI:
		if !w.Routes.set {
			l.errf(tomlpos.Join(path, "routes"), "required for internal_api categories: list the method and path of every call allowed")
		} else if w.Routes.ok && len(w.Routes.items) == 0 {
			l.errf(tomlpos.Join(path, "routes"), "empty: no call could be made; list the method and path of every call allowed")
		}
	}
	l.checkInspect(c, w)
	return c
}

// flag is *b, or def when the key is not written.
func flag(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

func kindLabel(k Kind) string {
	if k == KindNone {
		return "of no known kind"
	}
	return k.String()
}

func (l *loader) kind(name, path string, m map[string]any) Kind {
	v, present := m["kind"]
	if s, ok := v.(string); ok {
		if k, ok := kindByName[s]; ok {
			return k
		}
		l.errf(tomlpos.Join(path, "kind"), "unknown kind %q (want one of %s)", s, quoteList(kindList))
		return KindNone
	}
	if present { // not a string: decode reports it
		return KindNone
	}
	if k, ok := kindByName[name]; ok {
		return k
	}
	l.errf(path, "kind: required for a category not named after a kind (one of %s)", quoteList(kindList))
	return KindNone
}

func (l *loader) catHosts(c *Category, list *strs) {
	hosts, paths := list.vals, list.paths
	rules := make([]hostRule, 0, len(hosts))
	for i, h := range hosts {
		pat, wild, err := parseHostPattern(h)
		if err != nil {
			l.errf(paths[i], "%q: %v", h, err)
			continue
		}
		// duplicates are found when the rules are indexed (loader.categories)
		rules = append(rules, hostRule{pattern: pat, wildcard: wild, cat: c, rule: l.rule(paths[i])})
	}
	reasons := make([]string, len(rules))
	for i := range rules {
		reasons[i] = rules[i].pattern
	}
	reasons = joinEach("host matches ", reasons, " ("+c.r.path+")")
	c.Hosts = make([]string, len(rules))
	c.r.hosts = make([]*hostRule, len(rules))
	for i := range rules {
		rules[i].reason = reasons[i]
		c.Hosts[i] = rules[i].pattern
		c.r.hosts[i] = &rules[i]
	}
}

// joinEach returns prefix+s+suffix for each s, sharing one allocation.
func joinEach(prefix string, list []string, suffix string) []string {
	n := 0
	for _, s := range list {
		n += len(prefix) + len(s) + len(suffix)
	}
	b := make([]byte, 0, n)
	offs := make([]int, len(list)+1)
	for i, s := range list {
		b = append(append(append(b, prefix...), s...), suffix...)
		offs[i+1] = len(b)
	}
	all := string(b)
	out := make([]string, len(list))
	for i := range out {
		out[i] = all[offs[i]:offs[i+1]]
	}
	return out
}

func (l *loader) ports(c *Category, list *list) {
	path := tomlpos.Join(c.r.path, "ports")
	c.r.portsRule = l.rule(path)
	items, ok := list.items, list.ok
	if !ok {
		c.Ports = []PortRange{{443, 443}}
		if c.HTTP {
			c.Ports = append(c.Ports, PortRange{80, 80})
		}
	}
	for i, it := range items {
		ep := tomlpos.Elem(path, i)
		switch v := it.(type) {
		case int64:
			if v < 1 || v > 65535 {
				l.errf(ep, "port %d is out of range [1, 65535]", v)
				continue
			}
			c.Ports = append(c.Ports, PortRange{uint16(v), uint16(v)})
		case string:
			r, err := parsePortRange(v)
			if err != nil {
				l.errf(ep, "%q: %v", v, err)
				continue
			}
			c.Ports = append(c.Ports, r)
		default:
			l.errf(ep, "want a port number or a range such as \"8000-8099\", got %s", tomlType(it))
		}
	}
	if ok && len(items) == 0 {
		l.errf(path, "empty: no port could be reached")
	}
	s := make([]string, len(c.Ports))
	for i, r := range c.Ports {
		s[i] = r.String()
	}
	c.r.portsReason = "port is not in " + path + " [" + strings.Join(s, ", ") + "]"
}

func parsePortRange(s string) (PortRange, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	a, err1 := strconv.ParseUint(lo, 10, 16)
	b := a
	var err2 error
	if isRange {
		b, err2 = strconv.ParseUint(hi, 10, 16)
	}
	if err1 != nil || err2 != nil || a == 0 || b == 0 {
		return PortRange{}, fmt.Errorf("want a port or a range LOW-HIGH of ports 1-65535")
	}
	if a > b {
		return PortRange{}, fmt.Errorf("range is backwards")
	}
	return PortRange{uint16(a), uint16(b)}, nil
}

func (c *Category) portAllowed(port uint16) bool {
	for _, r := range c.Ports {
		if port >= r.Lo && port <= r.Hi {
			return true
		}
	}
	return false
}

var defaultMethods = map[Kind][]string{
	KindRegistries:  {"GET", "HEAD"},
	KindGit:         {"GET", "HEAD", "POST"},
	KindPublicWeb:   {"GET", "HEAD"},
	KindWebhooks:    {"POST"},
	KindInternalAPI: {"*"}, // routes decide
	KindNone:        {"GET", "HEAD"},
}

func (l *loader) methods(c *Category, w *strs) {
	path := tomlpos.Join(c.r.path, "methods")
	c.r.methodsRule = l.rule(path)
	list, paths, present := w.vals, w.paths, w.set
	if !present {
		list = defaultMethods[c.Kind]
		if !c.Inspect {
			list = []string{"*"}
		}
		paths = nil
	}
	c.r.methods = l.methodSet(list, paths, path)
	c.Methods = list
	c.r.methodsWhy = "method is not in " + path + " [" + strings.Join(list, ", ") + "]"
	if present && len(list) == 0 {
		l.errf(path, "empty: no request could be made; remove the category or list methods")
	}
}

func (l *loader) methodSet(list, paths []string, path string) methodSet {
	var ms methodSet
	for i, s := range list {
		p := path
		if paths != nil {
			p = paths[i]
		}
		if err := ms.add(s); err != nil {
			l.errf(p, "%q: %v", s, err)
		}
	}
	return ms
}

func (l *loader) routes(c *Category, wc *wireCategory) {
	path := tomlpos.Join(c.r.path, "routes")
	c.r.routesRule = l.rule(path)
	for i, it := range wc.Routes.items {
		ep := tomlpos.Elem(path, i)
		rm, ok := it.(map[string]any)
		if !ok {
			l.errf(ep, "want a table { methods = [...], path = \"...\" }, got %s", tomlType(it))
			continue
		}
		wc.routes = append(wc.routes, wireRoute{})
		w := &wc.routes[len(wc.routes)-1]
		l.decode(rm, ep, w, nil)
		rt := route{rule: l.rule(ep)}
		ok = true
		var ps string
		hasPath := w.Path != nil
		if _, present := rm["path"]; !present {
			l.errf(ep, "path: required")
		}
		if hasPath {
			ps = *w.Path
			pp, err := parsePathPattern(ps)
			if err != nil {
				l.errf(tomlpos.Join(ep, "path"), "%q: %v", ps, err)
				ok = false
			}
			rt.path = pp
		}
		ms, mpaths, present := w.Methods.vals, w.Methods.paths, w.Methods.set
		if !present {
			l.errf(ep, "methods: required (such as [\"GET\"], or [\"*\"] for any)")
		}
		nerr := len(l.errs)
		rt.methods = l.methodSet(ms, mpaths, tomlpos.Join(ep, "methods"))
		if !ok || !hasPath || !present || len(l.errs) > nerr {
			continue
		}
		rt.reason = "request matches " + ep + " (" + strings.Join(ms, ", ") + " " + ps + ")"
		c.r.routes = append(c.r.routes, rt)
	}
}

func (l *loader) inject(c *Category, w *wireInject) {
	path := tomlpos.Join(c.r.path, "inject")
	if w == nil {
		return
	}
	in := &Inject{Format: "{}"}
	if w.Header == nil || !validToken(*w.Header) {
		l.errf(tomlpos.Join(path, "header"), "required: an HTTP header name such as \"Authorization\"")
	} else {
		in.Header = *w.Header
	}
	if w.Secret == nil || !validSecretName(*w.Secret) {
		l.errf(tomlpos.Join(path, "secret"), "required: the name of a secret in the appliance's secret store (letters, digits, '_', '-', '.')")
	} else {
		in.Secret = *w.Secret
	}
	if w.Format != nil {
		f := *w.Format
		if !strings.Contains(f, "{}") {
			l.errf(tomlpos.Join(path, "format"), "%q has no \"{}\" where the secret goes", f)
		}
		if strings.ContainsAny(f, "\r\n") {
			l.errf(tomlpos.Join(path, "format"), "line breaks are not allowed in a header value")
		}
		in.Format = f
	}
	c.Inject = in
}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(isUnreserved(c) && c != '~' || strings.IndexByte("!#$%&'*+^`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func validSecretName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

func (l *loader) gitKeys(c *Category, w *wireCategory) {
	c.r.push = flag(w.Push, false)
	c.r.pushRule = l.rule(tomlpos.Join(c.r.path, "push"))
	repos, paths := w.Repos.vals, w.Repos.paths
	c.r.reposRule = l.rule(tomlpos.Join(c.r.path, "repos"))
	for i, s := range repos {
		rp, err := parseRepoPattern(s)
		if err != nil {
			l.errf(paths[i], "%q: %v", s, err)
			continue
		}
		rp.rule = l.rule(paths[i])
		c.r.repos = append(c.r.repos, rp)
	}
}

func (l *loader) webhookKeys(c *Category, w *wireCategory) {
	path := tomlpos.Join(c.r.path, "paths")
	c.r.pathsRule = l.rule(path)
	c.r.paths = map[string]Rule{}
	list, paths, present := w.Paths.vals, w.Paths.paths, w.Paths.set
	if !present {
		l.errf(path, "required for webhooks categories: the exact URL paths hooks are posted to")
	}
	for i, s := range list {
		n, err := NormalizePath(s)
		switch {
		case err != nil:
			l.errf(paths[i], "%q: %v", s, err)
		case n != s:
			l.errf(paths[i], "%q is not in normal form; write %q", s, n)
		case strings.Contains(s, "*"):
			l.errf(paths[i], "%q: webhook paths are exact; wildcards are not allowed", s)
		default:
			c.r.paths[s] = l.rule(paths[i])
		}
	}
	if v := w.MaxBody; v != nil {
		n, err := parseSize(v)
		if err != nil {
			l.errf(tomlpos.Join(c.r.path, "max_body"), "%v", err)
		}
		c.MaxBody = n
	}
	if w.Rate != nil {
		s := *w.Rate
		r, err := parseRate(s)
		if err != nil {
			l.errf(tomlpos.Join(c.r.path, "rate"), "%q: %v", s, err)
		}
		c.Rate = r
	}
}

func parseSize(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return 0, fmt.Errorf("size must not be negative")
		}
		return x, nil
	case string:
		units := []struct {
			suf string
			mul int64
		}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
		for _, u := range units {
			if num, ok := strings.CutSuffix(x, u.suf); ok {
				n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
				if err != nil || n < 0 || n > (1<<62)/u.mul {
					break
				}
				return n * u.mul, nil
			}
		}
		return 0, fmt.Errorf("size %q: want bytes as an integer or a string such as \"64KiB\" or \"1MB\"", x)
	}
	return 0, fmt.Errorf("want a size in bytes, got %s", tomlType(v))
}

func parseRate(s string) (Rate, error) {
	num, unit, ok := strings.Cut(s, "/")
	n, err := strconv.Atoi(strings.TrimSpace(num))
	if !ok || err != nil || n <= 0 {
		return Rate{}, fmt.Errorf("want N/UNIT such as \"10/min\" with N > 0")
	}
	per := map[string]time.Duration{"s": time.Second, "sec": time.Second, "second": time.Second,
		"m": time.Minute, "min": time.Minute, "minute": time.Minute,
		"h": time.Hour, "hour": time.Hour, "d": 24 * time.Hour, "day": 24 * time.Hour}[strings.TrimSpace(unit)]
	if per == 0 {
		return Rate{}, fmt.Errorf("unknown unit %q (want sec, min, hour or day)", unit)
	}
	return Rate{N: n, Per: int64(per)}, nil
}

// checkInspect refuses settings the proxy cannot enforce without
// decrypting the traffic.
func (l *loader) checkInspect(c *Category, w *wireCategory) {
	if c.Inspect {
		return
	}
	path := tomlpos.Join(c.r.path, "inspect")
	var why []string
	if w.Methods.set && !c.r.methods.any {
		why = append(why, "methods")
	}
	if len(c.r.routes) > 0 || c.Kind == KindInternalAPI {
		why = append(why, "routes")
	}
	if c.Inject != nil {
		why = append(why, "inject")
	}
	if len(c.Sentinels) > 0 {
		why = append(why, "sentinels")
	}
	switch c.Kind {
	case KindGit:
		if !c.r.push {
			why = append(why, "push = false (set push = true to splice git traffic)")
		}
		if len(c.r.repos) > 0 {
			why = append(why, "repos")
		}
	case KindRegistries:
		if !c.r.publish {
			why = append(why, "publish = false (set publish = true to splice registry traffic)")
		}
		if len(c.r.pkgAllow)+len(c.r.pkgDeny) > 0 {
			why = append(why, "packages")
		}
	case KindWebhooks:
		why = append(why, "paths", "max_body and rate")
	}
	if len(why) > 0 {
		l.errf(path, "inspect = false decides on the TLS server name alone and cannot enforce: %s", strings.Join(why, "; "))
	}
}

// isEmptyList: absent, or an empty array.
func isEmptyList(v any) bool {
	a, ok := v.([]any)
	return v == nil || ok && len(a) == 0
}
