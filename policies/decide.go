package policies

import (
	"net/netip"
	"strings"
)

// Precedence among rules that tie (the same, most specific host pattern in
// several categories): the more restrictive verdict wins. An explicit deny
// beats a deny by a request-level rule, which beats ask, which beats audit,
// which beats allow; `policy check` warns about such ties.
const (
	rankNone = iota
	rankAllow
	rankAudit
	rankAsk
	rankRuleDeny
	rankExplicitDeny
)

// ranked keeps the verdict of the highest rank offered (the first on a
// tie): every candidate rule of a host is decided and the strongest wins.
type ranked struct {
	v    Verdict
	rank int // rankNone until an offer
}

func (b *ranked) offer(v Verdict, rank int) {
	if rank > b.rank {
		b.v, b.rank = v, rank
	}
}

// Decide returns the verdict for one stage of a request. It is pure: no
// I/O, no logging, and on the dns and connect stages no allocation.
func (p *Policy) Decide(r Request) Verdict { return p.decide(&r, nil) }

func (p *Policy) decide(r *Request, tr *trace) Verdict {
	if p == nil {
		return Verdict{Action: ActionDeny, Rule: Rule{Name: "default"}, Reason: "no policy loaded"}
	}
	var v Verdict
	switch r.Stage {
	case StageDNS:
		v = p.decideDNS(r, tr)
	case StageConnect:
		v = p.decideConnect(r, tr)
	case StageHTTP:
		v = p.decideHTTP(r, tr)
	default:
		v = p.deny(p.defaultRule, "unknown request stage")
	}
	return p.finish(v)
}

// finish applies the audit mode of the category that decided (or of the
// policy): a would-deny becomes ActionAudit with WouldDeny set. WouldDeny
// is set only then, as docs/events.md defines would_deny: a deny verdict
// carries WouldDeny = false.
func (p *Policy) finish(v Verdict) Verdict {
	if v.Action > ActionAudit { // unknown action: fail closed
		v.Action = ActionDeny
	}
	if v.Action != ActionDeny {
		return v
	}
	mode := p.mode
	if v.Cat != nil {
		mode = v.Cat.Mode
	}
	if mode == ModeAudit {
		v.Action, v.WouldDeny = ActionAudit, true
	}
	return v
}

func (p *Policy) deny(rule Rule, reason string) Verdict {
	return Verdict{Action: ActionDeny, Rule: rule, Reason: reason}
}

func catVerdict(c *Category, a Action, rule Rule, reason string) Verdict {
	return Verdict{Action: a, Kind: c.Kind, Category: c.Name, Rule: rule, Reason: reason, Cat: c}
}

// splitHostPort strips a port from a Host header or authority, without
// allocating. Bracketed IPv6 keeps its brackets.
func splitHostPort(h string) (string, uint16) {
	if h == "" {
		return h, 0
	}
	if h[0] == '[' {
		if i := strings.LastIndex(h, "]:"); i > 0 {
			return h[:i+1], parsePort(h[i+2:])
		}
		return h, 0
	}
	if i := strings.LastIndexByte(h, ':'); i > 0 && strings.IndexByte(h, ':') == i {
		return h[:i], parsePort(h[i+1:])
	}
	return h, 0
}

func parsePort(s string) uint16 {
	if s == "" || len(s) > 5 {
		return 0
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0
		}
		n = n*10 + int(s[i]-'0')
	}
	if n > 65535 {
		return 0
	}
	return uint16(n)
}

// target is a request's destination, normalized.
type target struct {
	buf    hostBuf
	n      int // length of the normalized name in buf; 0 when the host is an address or absent
	ip     netip.Addr
	port   uint16
	bad    bool
	reason string
}

func (t *target) setHost(h string) {
	if h == "" {
		return
	}
	n, form, ip, err := canonHost(h, &t.buf)
	switch {
	case err != nil:
		t.bad, t.reason = true, "host is not a valid name or canonical IP address: "+err.Error()
	case form == formIP:
		if t.ip.IsValid() && t.ip != ip {
			t.bad, t.reason = true, "host address does not match the connection's address"
		}
		t.ip = ip
	default:
		t.n = n
	}
}

// name is the normalized host name (empty when there is none).
func (t *target) name() []byte { return t.buf[:t.n] }

func (p *Policy) denyCIDR(a netip.Addr) *cidrRule {
	for _, c := range p.denyCIDRs {
		if c.prefix.Contains(a) {
			return c
		}
	}
	return nil
}

// explicitDeny checks the [deny] section.
// refuseTarget decides what every connect and http decision refuses before
// any category is looked at: a malformed target, a target with neither a
// name nor an address, and anything the [deny] section names.
func (p *Policy) refuseTarget(t *target, tr *trace) (Verdict, bool) {
	if t.bad {
		return p.deny(p.defaultRule, t.reason), true
	}
	if t.n == 0 && !t.ip.IsValid() {
		return p.deny(p.defaultRule, "no host name or address to decide on"), true
	}
	return p.explicitDeny(t, tr)
}

func (p *Policy) explicitDeny(t *target, tr *trace) (Verdict, bool) {
	if t.n > 0 {
		if hr := p.denyHosts.lookup(t.name()); hr != nil {
			tr.add(hr.rule, "matches: [deny] wins over every category")
			return p.deny(hr.rule, hr.reason), true
		}
	}
	if t.ip.IsValid() {
		if c := p.denyCIDR(t.ip.Unmap()); c != nil {
			tr.add(c.rule, "matches: [deny] wins over every category")
			return p.deny(c.rule, c.reason), true
		}
	}
	return Verdict{}, false
}

// candidates returns the most specific host rules for the target, or the
// most specific category cidr when there is no name (or the name matches
// nothing).
func (p *Policy) candidates(t *target) (*hostRule, *cidrRule) {
	if t.n > 0 {
		if r := p.hosts.lookup(t.name()); r != nil {
			return r, nil
		}
	}
	if t.ip.IsValid() {
		a := t.ip.Unmap()
		for _, c := range p.cidrs {
			if c.prefix.Contains(a) {
				return nil, c
			}
		}
	}
	return nil, nil
}

func (p *Policy) noMatch(t *target) Verdict {
	if t.n > 0 {
		return p.deny(p.defaultRule, "no category covers this host")
	}
	return p.deny(p.defaultRule, "no category covers this address")
}

func (p *Policy) decideDNS(r *Request, tr *trace) Verdict {
	var t target
	if len(r.Host) > 0 && (r.Host[0] == '[' || strings.IndexByte(r.Host, ':') >= 0) {
		return p.deny(p.defaultRule, "not a DNS name")
	}
	t.setHost(r.Host)
	if t.bad || t.n == 0 {
		return p.deny(p.defaultRule, "not a valid DNS name")
	}
	if t.n > p.dns.MaxName {
		tr.add(p.dnsRules.maxName, "name is longer than max_name")
		return p.deny(p.dnsRules.maxName, "name is longer than dns.max_name")
	}
	if longestLabel(t.name()) > p.dns.MaxLabel {
		tr.add(p.dnsRules.maxLabel, "a label is longer than max_label")
		return p.deny(p.dnsRules.maxLabel, "a label is longer than dns.max_label")
	}
	if v, ok := p.explicitDeny(&t, tr); ok {
		return v
	}
	rules := p.hosts.lookup(t.name())
	if rules == nil {
		tr.add(p.defaultRule, "no category host pattern covers the name")
		return p.deny(p.defaultRule, "no category covers this name")
	}
	var best ranked
	for hr := rules; hr != nil; hr = hr.next {
		best.offer(p.dnsCategory(hr, r.QType, tr))
	}
	return best.v
}

func longestLabel(name []byte) int {
	longest, cur := 0, 0
	for _, c := range name {
		if c == '.' {
			cur = 0
			continue
		}
		cur++
		longest = max(longest, cur)
	}
	return longest
}

func (p *Policy) dnsCategory(hr *hostRule, qtype uint16, tr *trace) (Verdict, int) {
	c := hr.cat
	tr.add(hr.rule, "the most specific pattern that matches")
	if c.Action == ActionDeny {
		tr.add(c.r.actionRule, "category action is deny")
		return catVerdict(c, ActionDeny, c.r.actionRule, c.r.denyReason), rankExplicitDeny
	}
	if qtype != 0 && !hasQType(p.dns.QTypes, qtype) && !hasQType(c.DNSTypes, qtype) {
		tr.add(p.dnsRules.qtypes, "query type is in neither dns.qtypes nor the category's dns_types")
		return catVerdict(c, ActionDeny, p.dnsRules.qtypes, c.r.qtypeReason), rankRuleDeny
	}
	if c.Action == ActionAudit {
		return catVerdict(c, ActionAudit, hr.rule, hr.reason), rankAudit
	}
	return catVerdict(c, ActionAllow, hr.rule, hr.reason), rankAllow
}

func (p *Policy) decideConnect(r *Request, tr *trace) Verdict {
	if hasEmptyPort(r.Host) {
		return p.deny(p.defaultRule, "host has an empty port (\"name:\")")
	}
	var t target
	t.ip = r.IP
	host, port := splitHostPort(r.Host)
	t.port = r.Port
	if t.port == 0 {
		t.port = port
	}
	if r.SNI != "" {
		t.setHost(r.SNI)
		if host != "" && !t.bad {
			var other target
			other.setHost(host)
			if !other.bad && other.n > 0 && string(other.name()) != string(t.name()) {
				return p.deny(p.defaultRule, "TLS server name does not match the requested host")
			}
			if other.ip.IsValid() && !t.ip.IsValid() {
				t.ip = other.ip
			}
		}
	} else {
		t.setHost(host)
	}
	if v, ok := p.refuseTarget(&t, tr); ok {
		return v
	}
	rules, cidr := p.candidates(&t)
	if cidr != nil {
		v, _ := p.connectCategory(cidr.cat, cidr.rule, cidr.reason, &t, tr)
		return lockedSplice(r, v, tr)
	}
	if rules == nil {
		tr.add(p.defaultRule, "no category host pattern or cidr covers the destination")
		return p.noMatch(&t)
	}
	var best ranked
	for hr := rules; hr != nil; hr = hr.next {
		best.offer(p.connectCategory(hr.cat, hr.rule, hr.reason, &t, tr))
	}
	return lockedSplice(r, best.v, tr)
}

// lockedSplice refuses a connection of a sandbox created with lockfiles
// to a registries category that is not inspected: its downloads would be
// spliced, and no lockfile digest or version could be checked.
func lockedSplice(r *Request, v Verdict, tr *trace) Verdict {
	if r.Lock == nil || v.Cat == nil || v.Cat.Kind != KindRegistries || v.Cat.Inspect || v.Action == ActionDeny {
		return v
	}
	const why = "the sandbox's lockfiles cannot be enforced in a registries category with inspect = false"
	tr.add(r.Lock.Rule(), why)
	return catVerdict(v.Cat, ActionDeny, r.Lock.Rule(), why)
}

// common checks every stage shares after a category matched.
func (p *Policy) common(c *Category, rule Rule, t *target, tr *trace) (Verdict, int, bool) {
	if rule.Name != "" {
		tr.add(rule, "the most specific rule that matches")
	}
	if c.Action == ActionDeny {
		tr.add(c.r.actionRule, "category action is deny")
		return catVerdict(c, ActionDeny, c.r.actionRule, c.r.denyReason), rankExplicitDeny, true
	}
	if !c.portAllowed(t.port) {
		tr.add(c.r.portsRule, "port is not allowed")
		return catVerdict(c, ActionDeny, c.r.portsRule, c.r.portsReason), rankRuleDeny, true
	}
	if t.ip.IsValid() {
		if !p.reach(t.ip, c, nil).Allowed() {
			tr.add(c.r.cidrsRule, "address is not public and the category's cidrs do not name it")
			return catVerdict(c, ActionDeny, c.r.cidrsRule, c.r.addrReason), rankRuleDeny, true
		}
	}
	return Verdict{}, 0, false
}

func (p *Policy) connectCategory(c *Category, rule Rule, reason string, t *target, tr *trace) (Verdict, int) {
	if v, rank, done := p.common(c, rule, t, tr); done {
		return v, rank
	}
	switch {
	case c.Action == ActionAudit:
		return catVerdict(c, ActionAudit, rule, reason), rankAudit
	case c.Action == ActionAsk && !c.Inspect:
		return catVerdict(c, ActionAsk, rule, reason), rankAsk
	case c.Action == ActionAsk:
		// Inspected: the connection is opened and each request asks.
		return catVerdict(c, ActionAllow, rule, c.r.askReason), rankAsk
	}
	return catVerdict(c, ActionAllow, rule, reason), rankAllow
}

// decideHTTP decides a request as its method, then as every method its
// override headers or "_method" parameters name (servers that honour
// them run the request as that method): each must be allowed.
func (p *Policy) decideHTTP(r *Request, tr *trace) Verdict {
	v := p.decideHTTPAs(r, tr)
	if !v.Action.Allows() && v.Action != ActionAsk {
		return v
	}
	methods, err := overrideMethods(r)
	if err != nil {
		if v.Cat == nil {
			return p.deny(p.defaultRule, err.Error())
		}
		tr.add(v.Cat.r.methodsRule, err.Error())
		return catVerdict(v.Cat, ActionDeny, v.Cat.r.methodsRule, err.Error())
	}
	for _, m := range methods {
		if m == r.Method {
			continue
		}
		as := *r
		as.Method = m
		ov := p.decideHTTPAs(&as, tr)
		switch {
		case !ov.Action.Allows() && ov.Action != ActionAsk:
			ov.Reason = "decided as " + m + ", the method an override names: " + ov.Reason
			return ov
		case ov.Action == ActionAsk:
			v = ov
		}
	}
	return v
}

// hasEmptyPort: "name:" or "[addr]:", a port separator with no port.
func hasEmptyPort(h string) bool {
	return strings.HasSuffix(h, ":") && (h[0] == '[' || strings.Count(h, ":") == 1)
}

func (p *Policy) decideHTTPAs(r *Request, tr *trace) Verdict {
	if hasEmptyPort(r.Host) {
		return p.deny(p.defaultRule, "host has an empty port (\"name:\")")
	}
	var t target
	t.ip = r.IP
	host, port := splitHostPort(r.Host)
	t.port = r.Port
	if t.port == 0 {
		t.port = port
	}
	scheme := r.Scheme
	if scheme == "" {
		scheme = "https"
	}
	if scheme != "https" && scheme != "http" {
		return p.deny(p.defaultRule, "scheme is neither http nor https")
	}
	if t.port == 0 {
		t.port = 443
		if scheme == "http" {
			t.port = 80
		}
	}
	t.setHost(host)
	if v, ok := p.refuseTarget(&t, tr); ok {
		return v
	}
	path, err := NormalizePath(r.Path)
	if err != nil {
		return p.deny(p.defaultRule, "request path is malformed: "+err.Error())
	}
	rules, cidr := p.candidates(&t)
	if cidr != nil {
		v, _ := p.httpCategory(cidr.cat, cidr.rule, cidr.reason, &t, r, scheme, path, tr)
		return v
	}
	if rules == nil {
		tr.add(p.defaultRule, "no category host pattern or cidr covers the destination")
		return p.noMatch(&t)
	}
	var best ranked
	for hr := rules; hr != nil; hr = hr.next {
		best.offer(p.httpCategory(hr.cat, hr.rule, hr.reason, &t, r, scheme, path, tr))
	}
	return best.v
}

func (p *Policy) httpCategory(c *Category, rule Rule, reason string, t *target, r *Request, scheme, path string, tr *trace) (Verdict, int) {
	ruleDeny := func(rule Rule, why string) (Verdict, int) {
		tr.add(rule, why)
		return catVerdict(c, ActionDeny, rule, why), rankRuleDeny
	}
	if scheme == "http" && !c.HTTP && c.Action != ActionDeny {
		tr.add(rule, "the most specific rule that matches")
		return ruleDeny(c.r.httpRule, "plain http is not allowed ("+c.r.path+".http = false)")
	}
	if v, rank, done := p.common(c, rule, t, tr); done {
		return v, rank
	}
	if !c.r.allowDoH {
		if why := dohShape(r); why != "" {
			return ruleDeny(c.r.allowDoHRule, "doh_blocked: a DNS-over-HTTPS request ("+why+"); "+c.r.path+".allow_doh is not set")
		}
	}
	switch c.Kind {
	case KindGit:
		if !c.r.push {
			if why := gitWrite(r, path); why != "" {
				return ruleDeny(c.r.pushRule, why+" ("+c.r.path+".push = false)")
			}
		}
		if len(c.r.repos) > 0 && !c.repoAllowed(path) {
			return ruleDeny(c.r.reposRule, "repository is not in "+c.r.path+".repos")
		}
	case KindRegistries:
		if !c.r.publish && isPublish(r.Method, path) {
			return ruleDeny(c.r.publishRule, "publishing to a registry is not allowed ("+c.r.path+".publish = false)")
		}
	case KindWebhooks:
		if _, ok := c.r.paths[path]; !ok {
			return ruleDeny(c.r.pathsRule, "path is not one of "+c.r.path+".paths")
		}
	}
	if !c.r.methods.has(r.Method) {
		return ruleDeny(c.r.methodsRule, c.r.methodsWhy)
	}
	if len(c.r.routes) > 0 || c.Kind == KindInternalAPI {
		rt := c.matchRoute(r.Method, path)
		if tr != nil {
			for i := range c.r.routes {
				if &c.r.routes[i] == rt {
					break
				}
				tr.add(c.r.routes[i].rule, "the method or the path does not match")
			}
		}
		if rt == nil {
			return ruleDeny(c.r.routesRule, "no route in "+c.r.path+".routes matches the method and path")
		}
		rule, reason = rt.rule, rt.reason
		tr.add(rule, "the first route that matches the method and path")
	}
	var pkg Package
	if c.Kind == KindRegistries {
		v, rank, done := p.packageRules(c, r, path, tr)
		if done {
			return v, rank
		}
		if v.Rule.Name != "" {
			rule, reason = v.Rule, v.Reason
			tr.add(rule, "the package matches this allow pattern")
		}
		pkg = v.Package
	}
	if c.Kind == KindWebhooks {
		rule = c.r.paths[path]
		tr.add(rule, "the path is listed")
	}
	a, rank := ActionAllow, rankAllow
	switch c.Action {
	case ActionAudit:
		a, rank = ActionAudit, rankAudit
	case ActionAsk:
		a, rank = ActionAsk, rankAsk
	}
	v := catVerdict(c, a, rule, reason)
	v.Package = pkg
	return v, rank
}

func (c *Category) repoAllowed(path string) bool {
	owner, repo, ok := repoOf(path)
	if !ok {
		return false
	}
	for i := range c.r.repos {
		if c.r.repos[i].match(owner, repo) {
			return true
		}
	}
	return false
}

func (c *Category) matchRoute(method, path string) *route {
	for i := range c.r.routes {
		rt := &c.r.routes[i]
		if rt.methods.has(method) && rt.path.match(path) {
			return rt
		}
	}
	return nil
}

// packageRules applies packages.deny and packages.allow to the package
// the request fetches, then the lockfiles the sandbox was created with
// (Request.Lock). done is set when it decided (a deny); otherwise a
// non-empty rule in v names the allow pattern that matched. v.Package is
// the package recognized, if any.
func (p *Policy) packageRules(c *Category, r *Request, path string, tr *trace) (Verdict, int, bool) {
	var pkg Package
	ok, meta := false, false
	if r.Package != nil {
		pkg, ok = *r.Package, true
	} else {
		host, _ := splitHostPort(r.Host)
		pkg, ok, meta = c.readPackage(host, path)
	}
	v, rank, done := p.categoryPackages(c, pkg, ok, meta, path, tr)
	if done || r.Lock == nil {
		return v, rank, done
	}
	return sandboxLocked(c, r.Lock, pkg, ok || meta, v, tr)
}

// categoryPackages applies the category's own package rules. A category
// with package rules denies a path that is neither a package nor
// registry metadata: a mirror layout it does not know must not pass
// unchecked.
func (p *Policy) categoryPackages(c *Category, pkg Package, ok, meta bool, path string, tr *trace) (Verdict, int, bool) {
	if v := c.sdistDeny(pkg, path); ok && v != nil {
		tr.add(v.Rule, "a source distribution the category refuses")
		return *v, rankRuleDeny, true
	}
	if len(c.r.pkgAllow)+len(c.r.pkgDeny) == 0 && c.r.lock == nil || meta {
		return Verdict{Package: pkg}, 0, false
	}
	if !ok {
		tr.add(c.r.pkgRule, "the path is not a package this category recognizes")
		return catVerdict(c, ActionDeny, c.r.pkgRule, c.r.unrecognized), rankRuleDeny, true
	}
	for i := range c.r.pkgDeny {
		if pp := &c.r.pkgDeny[i]; pp.match(&pkg) {
			tr.add(pp.rule, "package matches a deny pattern")
			v := catVerdict(c, ActionDeny, pp.rule, "package "+pkg.Ecosystem+":"+pkg.Name+" matches "+pp.raw)
			v.Package = pkg
			return v, rankRuleDeny, true
		}
	}
	if lk := c.r.lock; pkg.Version != "" && !lk.Allows(pkg) {
		return lockDeny(c, lk, pkg, tr)
	}
	allowRule, listed := c.r.pkgAllowEco[pkg.Ecosystem]
	if !listed {
		return Verdict{Package: pkg}, 0, false
	}
	for i := range c.r.pkgAllow {
		if pp := &c.r.pkgAllow[i]; pp.matchVersion(&pkg, true) {
			return Verdict{Rule: pp.rule, Reason: "package " + pkg.Ecosystem + ":" + pkg.Name + " matches " + pp.raw, Package: pkg}, 0, false
		}
	}
	tr.add(allowRule, "package is not in the allow list of its ecosystem")
	v := catVerdict(c, ActionDeny, allowRule, "package "+pkg.Ecosystem+":"+pkg.Name+" is not in "+c.r.path+".packages.allow")
	v.Package = pkg
	return v, rankRuleDeny, true
}

// sandboxLocked applies the sandbox's lockfiles to what the category
// allowed: a version they do not list is denied (not_in_lockfile), and so
// is a path that is neither a package nor registry metadata (read is
// false): a path the proxy cannot read must not pass unchecked.
func sandboxLocked(c *Category, lk *LockSet, pkg Package, read bool, v Verdict, tr *trace) (Verdict, int, bool) {
	if !read {
		const why = "the path is not a package or metadata, and the sandbox has lockfiles"
		tr.add(lk.rule, why)
		return catVerdict(c, ActionDeny, lk.rule, c.lockedPathReason()), rankRuleDeny, true
	}
	if pkg.Version != "" && !lk.Allows(pkg) {
		return lockDeny(c, lk, pkg, tr)
	}
	return v, 0, false
}

// lockDeny is the verdict on a version the lockfiles lk do not list.
func lockDeny(c *Category, lk *LockSet, pkg Package, tr *trace) (Verdict, int, bool) {
	tr.add(lk.rule, "the version is not in the lockfiles")
	v := catVerdict(c, ActionDeny, lk.rule, lk.Reason(pkg))
	v.Package = pkg
	return v, rankRuleDeny, true
}
