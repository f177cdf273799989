package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	first, last time.Time
	denied      string // the enforcing rule, if recorded traffic was refused
}

// suggester gathers evidence from events.
type suggester struct {
	hosts     map[string]*hostUse
	sandboxes map[string]bool
	events    int
	from, to  time.Time
}

// Suggest writes a minimal TOML policy that allows the recorded traffic
// matching q (a sandbox run in audit mode): exact hosts grouped by the
// category that decided them (or by the kind their traffic shows), only
// the methods, ports, query types and non-public addresses seen, with
// comments citing the evidence. Requests an enforcing policy refused are
// listed in comments, not allowed. Names only looked up are not allowed.
func Suggest(ctx context.Context, st *Store, q Query) (string, error) {
	s := &suggester{hosts: map[string]*hostUse{}, sandboxes: map[string]bool{}}
	if err := st.Each(ctx, q, func(e Event) error { s.add(&e); return nil }); err != nil {
		return "", err
	}
	if s.events == 0 {
		return "", ErrNothingToSuggest
	}
	return s.render(q), nil
}

func (s *suggester) use(host string, e *Event) *hostUse {
	key := strings.ToLower(strings.TrimSuffix(host, "."))
	u := s.hosts[key]
	if u == nil {
		u = &hostUse{host: key, methods: map[string]bool{}, ports: map[uint16]bool{},
			addrs: map[netip.Addr]bool{}, qtypes: map[string]bool{}, first: e.Time}
		s.hosts[key] = u
	}
	u.last = e.Time
	if e.Category != "" && u.category == "" {
		u.category = e.Category
	}
	if e.Verdict == "deny" && u.denied == "" {
		u.denied = dashIfEmpty(e.Rule)
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
	u := s.use(host, e)
	switch req.Stage {
	case policies.StageDNS:
		u.dns++
		u.qtypes[policies.QTypeString(req.QType)] = true
		s.addAddrs(u, e.DNS.Answers)
	case policies.StageConnect:
		u.flows++
		u.ports[req.Port] = true
		u.spliced = u.spliced || e.Flow.Handling == "splice"
		if host == "" && req.IP.IsValid() {
			u.addrs[req.IP] = true // a bare address is decided by cidrs, public or not
		}
		s.addAddrs(u, []string{req.IP.String()})
	case policies.StageHTTP:
		s.addHTTP(u, &req, e)
	}
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
	if p := e.HTTP.Package; p != nil {
		u.pkgs = appendUnique(u.pkgs, fmt.Sprintf("%s:%s@%s", p.Ecosystem, p.Name, p.Version), 5)
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
}

// groups sorts the used destinations into categories. Names only looked
// up, and destinations an enforcing policy refused, are returned apart.
func (s *suggester) groups() (gs []*group, dnsOnly, refused []*hostUse) {
	byName := map[string]*group{}
	keys := make([]string, 0, len(s.hosts))
	for k := range s.hosts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		u := s.hosts[k]
		switch {
		case u.denied != "":
			refused = append(refused, u)
			continue
		case u.flows == 0 && u.requests == 0:
			dnsOnly = append(dnsOnly, u)
			continue
		}
		name, inspect := groupName(u)
		g := byName[name]
		if g == nil {
			g = &group{name: name, inspect: inspect}
			byName[name] = g
			gs = append(gs, g)
		}
		g.hosts = append(g.hosts, u)
	}
	for _, g := range gs {
		g.kind = inferKind(g)
		g.name = fixName(g.name, g.kind)
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].name < gs[j].name })
	return gs, dnsOnly, refused
}

func groupName(u *hostUse) (string, bool) {
	name := u.category
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
