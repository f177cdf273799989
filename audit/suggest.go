package audit

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"sort"
	"strings"
	"time"

	"airlock/policies"
)

// ErrNothingToSuggest means no recorded request matched.
var ErrNothingToSuggest = errors.New("audit: no recorded dns, flow or http events to suggest a policy from")

// hostUse is what one destination was used for.
type hostUse struct {
	host        string // "" for bare addresses
	category    string // as recorded
	methods     map[string]bool
	ports       map[uint16]bool
	http        bool // plain http seen
	addrs       map[netip.Addr]bool
	qtypes      map[string]bool
	dns, flows  int
	requests    int
	spliced     bool // a flow was spliced (decided on SNI only)
	git, push   bool
	pkgs        []string
	samples     []string
	paths       map[string]map[string]bool // normalized path -> methods
	refusedHTTP bool                       // an http request to it was refused
	first, last time.Time
}

// SuggestOptions says what Suggest may turn into an allow. The zero value
// allows only what was let through and kept nothing from a source policy.
type SuggestOptions struct {
	// Source is the policy the traffic was recorded under, and SourceText
	// its TOML. Its [deny] and [dns] sections are kept, and each category
	// that decided recorded traffic is kept whole (kind, action, methods,
	// routes, paths, inject, packages...) with its hosts narrowed to the
	// names seen.
	Source     *policies.Policy
	SourceText []byte
	// AllowWouldDeny turns requests an audit-mode policy would have denied
	// into allows. Without it they are refused in the suggestion.
	AllowWouldDeny bool
	// AllowInternal allows non-public destination addresses (private,
	// CGNAT, link-local, the metadata service, loopback) that no source
	// category names. Without it they are refused in the suggestion.
	AllowInternal bool
}

// refusal is a request the suggestion keeps refused, and why.
type refusal struct {
	host, line, why string
}

// suggester gathers evidence from events.
type suggester struct {
	opt       SuggestOptions
	hosts     map[string]*hostUse
	sandboxes map[string]bool
	events    int
	from, to  time.Time
	allowed   map[string]string // request line -> expected verdict
	lineHost  map[string]string // request line -> its hostUse key
	order     []string          // allowed request lines in the order seen
	refused   []refusal
	refusedAt map[string]bool
}

// Suggest writes a minimal TOML policy that allows the recorded traffic
// matching q: exact hosts grouped by the category that decided them (the
// source policy's category when there is one, else by the kind their
// traffic shows), only the methods, ports, query types and addresses seen,
// with comments citing the evidence, and [[tests]] for what it allows and
// refuses. What an enforcing rule refused stays refused; would-denies and
// non-public addresses only with opt's flags. Names only looked up are not
// allowed. The result is checked: it loads without warnings and its tests
// pass, or Suggest returns an error.
func Suggest(ctx context.Context, st *Store, q Query, opt SuggestOptions) (string, error) {
	s := &suggester{opt: opt, hosts: map[string]*hostUse{}, sandboxes: map[string]bool{},
		allowed: map[string]string{}, lineHost: map[string]string{}, refusedAt: map[string]bool{}}
	if err := st.Each(ctx, q, func(e Event) error { s.add(&e); return nil }); err != nil {
		return "", err
	}
	if s.events == 0 {
		return "", ErrNothingToSuggest
	}
	text, err := s.render(q)
	if err != nil {
		return "", err
	}
	return text, verifySuggestion(text)
}

func (s *suggester) use(host string, e *Event) *hostUse {
	key := strings.ToLower(strings.TrimSuffix(host, "."))
	u := s.hosts[key]
	if u == nil {
		u = &hostUse{host: key, methods: map[string]bool{}, ports: map[uint16]bool{},
			addrs: map[netip.Addr]bool{}, qtypes: map[string]bool{}, paths: map[string]map[string]bool{}, first: e.Time}
		s.hosts[key] = u
	}
	u.last = e.Time
	if e.Category != "" && u.category == "" {
		u.category = e.Category
	}
	return u
}

func (s *suggester) add(e *Event) {
	req, ok := RequestOf(e)
	if !ok {
		return
	}
	s.events++
	if s.from.IsZero() {
		s.from = e.Time
	}
	s.to = e.Time
	if e.Sandbox != "" {
		s.sandboxes[e.Sandbox] = true
	}
	host := req.Host
	if req.IP.IsValid() && host == req.IP.String() {
		host = "" // a bare address: decided by cidrs
	}
	line := DescribeRequest(req)
	if why := s.refuses(e, &req); why != "" {
		s.refuse(host, line, why)
		if req.Stage == policies.StageHTTP {
			s.use(host, e).refusedHTTP = true
		}
		return
	}
	u := s.use(host, e)
	switch req.Stage {
	case policies.StageDNS:
		u.dns++
		u.qtypes[policies.QTypeString(req.QType)] = true
		if s.opt.AllowInternal {
			s.addAddrs(u, e.DNS.Answers)
		}
	case policies.StageConnect:
		u.flows++
		u.ports[req.Port] = true
		u.spliced = u.spliced || e.Flow.Handling == "splice"
		if req.IP.IsValid() && (host == "" || !policies.Classify(req.IP.Unmap()).Public()) && s.sourceCat(e) == nil {
			u.addrs[req.IP.Unmap()] = true // a bare address is decided by cidrs, public or not
		}
	case policies.StageHTTP:
		s.addHTTP(u, &req, e)
	}
	s.expect(line, u.host, e)
}

// sourceCat is the source policy's category that decided e, if any.
func (s *suggester) sourceCat(e *Event) *policies.Category {
	if s.opt.Source == nil || e.Category == "" {
		return nil
	}
	c, _ := s.opt.Source.Category(e.Category)
	return c
}

// refuses says why the suggestion must not allow e, or "".
func (s *suggester) refuses(e *Event, req *policies.Request) string {
	rule := dashIfEmpty(e.Rule)
	switch {
	case e.Verdict == "deny":
		return "refused by " + rule
	case e.WouldDeny && !s.opt.AllowWouldDeny:
		return "would have been refused by " + rule + " (audit mode); only --allow-would-deny allows it"
	case e.WouldDeny && (s.sourceCat(e) != nil || s.opt.Source != nil && strings.HasPrefix(e.Rule, "deny.")):
		return "would have been refused by " + rule + ", a rule of the source policy that is kept"
	}
	if !req.IP.IsValid() || s.opt.AllowInternal {
		return ""
	}
	a := req.IP.Unmap()
	if c := s.sourceCat(e); policies.Classify(a).Public() || c != nil && containsAddr(c.CIDRs, a) {
		return ""
	}
	return "address " + a.String() + " is not public; only --allow-internal-addrs allows it"
}

func containsAddr(list []netip.Prefix, a netip.Addr) bool {
	for _, p := range list {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (s *suggester) refuse(host, line, why string) {
	if s.refusedAt[line] {
		return
	}
	s.refusedAt[line] = true
	s.refused = append(s.refused, refusal{host: host, line: line, why: why})
}

// expect records what the suggestion must decide for an allowed request.
func (s *suggester) expect(line, host string, e *Event) {
	want := "allow"
	if s.sourceCat(e) != nil && (e.Verdict == "audit" || e.Verdict == "ask") {
		want = e.Verdict
	}
	if _, seen := s.allowed[line]; !seen {
		s.order = append(s.order, line)
	}
	s.allowed[line] = want
	s.lineHost[line] = host
}

func (s *suggester) addHTTP(u *hostUse, req *policies.Request, e *Event) {
	u.requests++
	u.methods[req.Method] = true
	u.ports[req.Port] = true
	u.http = u.http || req.Scheme == "http"
	lp := strings.ToLower(req.Path + "?" + req.Query)
	if strings.Contains(lp, "git-upload-pack") || strings.Contains(lp, "git-receive-pack") {
		u.git = true
		u.push = u.push || strings.Contains(lp, "git-receive-pack")
	}
	if n, err := policies.NormalizePath(req.Path); err == nil {
		if u.paths[n] == nil {
			u.paths[n] = map[string]bool{}
		}
		u.paths[n][req.Method] = true
	}
	if p := e.HTTP.Package; p != nil {
		pkg := p.Ecosystem + ":" + p.Name
		if p.Version != "" {
			pkg += "@" + p.Version
		}
		u.pkgs = appendUnique(u.pkgs, pkg, 5)
	}
	u.samples = appendUnique(u.samples, req.Method+" "+req.Path, 3)
}

func (s *suggester) addAddrs(u *hostUse, addrs []string) {
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err == nil && !policies.Classify(ip.Unmap()).Public() {
			u.addrs[ip.Unmap()] = true
		}
	}
}

func appendUnique(list []string, s string, limit int) []string {
	if len(list) >= limit || contains(list, s) {
		return list
	}
	return append(list, s)
}

// group is one category of the suggested policy.
type group struct {
	name, kind string
	inspect    bool
	hosts      []*hostUse
	source     bool // kept from the source policy
}

// fromSource marks a group named after a source category.
func (s *suggester) fromSource(g *group) bool {
	if s.opt.Source == nil {
		return false
	}
	if _, ok := s.opt.Source.Category(g.name); ok {
		g.source = true
	}
	return g.source
}

// groups sorts the used destinations into categories. Names only looked
// up, and destinations an enforcing policy refused, are returned apart.
func (s *suggester) groups() (gs []*group, dnsOnly []*hostUse) {
	byName := map[string]*group{}
	keys := make([]string, 0, len(s.hosts))
	for k := range s.hosts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		u := s.hosts[k]
		if u.flows == 0 && u.requests == 0 {
			if u.dns > 0 {
				dnsOnly = append(dnsOnly, u)
			}
			continue
		}
		name, inspect := s.groupName(u)
		g := byName[name]
		if g == nil {
			g = &group{name: name, inspect: inspect}
			byName[name] = g
			gs = append(gs, g)
		}
		g.hosts = append(g.hosts, u)
	}
	for _, g := range gs {
		if s.fromSource(g) {
			continue
		}
		g.kind = inferKind(g)
		g.name = fixName(g.name, g.kind)
		if s.opt.Source != nil {
			if _, clash := s.opt.Source.Category(g.name); clash {
				g.name += "_suggested"
			}
		}
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].name < gs[j].name })
	return gs, dnsOnly
}

func (s *suggester) groupName(u *hostUse) (string, bool) {
	name := u.category
	if s.opt.Source != nil && name != "" {
		if _, ok := s.opt.Source.Category(name); ok {
			return name, true // kept whole, spliced or not
		}
	}
	switch {
	case name != "":
	case u.host == "":
		name = "addresses" // bare addresses, decided by cidrs
	default:
		name = inferKind(&group{inspect: true, hosts: []*hostUse{u}})
	}
	if u.spliced && u.requests == 0 {
		return name + "_spliced", false
	}
	return name, true
}

func inferKind(g *group) string {
	if !g.inspect {
		return "public_web"
	}
	git, pkg, write := false, false, false
	for _, u := range g.hosts {
		git = git || u.git
		pkg = pkg || len(u.pkgs) > 0
		for m := range u.methods {
			write = write || (m != "GET" && m != "HEAD")
		}
	}
	switch {
	case git:
		return "git"
	case pkg && !write:
		return "registries"
	}
	return "public_web"
}

var builtinKinds = map[string]bool{"registries": true, "git": true, "internal_api": true, "webhooks": true, "public_web": true}

// fixName keeps a category name unless it names a different built-in kind.
func fixName(name, kind string) string {
	if builtinKinds[name] && name != kind {
		return name + "_" + kind
	}
	return name
}

func tomlString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

func tomlList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = tomlString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
