package policies

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"airlock/internal/safefile"
	"airlock/internal/tomlpos"
)

const internalErrorMsg = "internal error while loading the policy"

// Policy is a loaded, validated and compiled policy. It is immutable and
// safe for concurrent use.
type Policy struct {
	file        string
	name        string
	hash        string
	description string
	mode        Mode
	modeRule    Rule
	dns         DNSConfig
	dnsRules    dnsRules
	cats        []*Category
	catByName   map[string]*Category
	hosts       *hostIndex  // every category host pattern
	cidrs       []*cidrRule // every category cidr, longest prefix first
	denyHosts   *hostIndex
	denyCIDRs   []*cidrRule
	denyPos     Position
	defaultRule Rule
	tests       []TestCase
	warnings    ErrorList // see lint.go
}

type dnsRules struct {
	qtypes, maxLabel, maxName Rule
}

// Load reads and parses a policy file. It reads only a regular file of at
// most MaxPolicySize, and no symbolic link that leaves the file's directory
// (a FIFO or a link to a device would hang or exhaust the reader).
func Load(path string) (*Policy, error) {
	data, err := safefile.ReadIn(filepath.Dir(path), filepath.Base(path), MaxPolicySize)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return Parse(path, data)
}

// Parse parses a policy from data; file names it in errors and rules.
// The error, if any, is an ErrorList with every problem found.
func Parse(file string, data []byte) (p *Policy, err error) {
	defer func() { // a bug here must not take the appliance down
		if r := recover(); r != nil {
			p = nil
			err = ErrorList{{Pos: Position{File: file, Line: 1, Col: 1}, Msg: fmt.Sprintf("%s: %v", internalErrorMsg, r)}}
		}
	}()
	if len(data) > MaxPolicySize {
		return nil, ErrorList{{Pos: Position{File: file, Line: 1, Col: 1}, Msg: "policy file is larger than " + maxPolicySizeText}}
	}
	var tree map[string]any
	if _, err := toml.Decode(string(data), &tree); err != nil {
		return nil, tomlError(file, data, err)
	}
	l := &loader{file: file, ix: tomlpos.Scan(string(data))}
	if l.limits(tree); len(l.errs) > 0 {
		return nil, l.errs
	}
	sum := sha256.Sum256(data)
	p = &Policy{
		file: file,
		name: strings.TrimSuffix(filepath.Base(file), ".toml"),
		hash: hex.EncodeToString(sum[:]),
	}
	l.policy(p, tree)
	if len(l.lockSums) > 0 {
		h := sha256.New()
		h.Write(data)
		h.Write(l.lockSums)
		p.hash = hex.EncodeToString(h.Sum(nil))
	}
	if len(l.errs) == 0 {
		p.warnings = l.lint(p, data)
	}
	if len(l.errs) > 0 {
		l.errs.sort()
		return nil, l.errs
	}
	return p, nil
}

// tomlError positions a TOML syntax error from its byte offset: the
// parser's own line is the one after the mistake when it reads past a line
// end (users.md S9). When the offending token sits on a later line than the
// text before it, the error points just after that text, where the missing
// ']' or ',' belongs, and says where the parser stopped.
func tomlError(file string, data []byte, err error) error {
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		return ErrorList{{Pos: Position{File: file, Line: 1, Col: 1}, Msg: err.Error()}}
	}
	at := min(max(pe.Position.Start, 0), len(data))
	msg := "TOML syntax: " + pe.Message
	p := at
	for p > 0 && strings.IndexByte(" \t\r\n", data[p-1]) >= 0 {
		p--
	}
	found := offsetPos(file, data, at)
	if bytes.IndexByte(data[p:at], '\n') < 0 {
		return ErrorList{{Pos: found, Msg: msg}}
	}
	if at < len(data) {
		msg += fmt.Sprintf(" on line %d", found.Line)
	}
	return ErrorList{{Pos: offsetPos(file, data, p), Msg: msg}}
}

// offsetPos is the line and (byte) column of data[off].
func offsetPos(file string, data []byte, off int) Position {
	line := 1 + bytes.Count(data[:off], []byte{'\n'})
	col := off + 1
	if nl := bytes.LastIndexByte(data[:off], '\n'); nl >= 0 {
		col = off - nl
	}
	return Position{File: file, Line: line, Col: col}
}

func (l *loader) policy(p *Policy, tree map[string]any) {
	w := &l.wire
	l.wireCats = map[*Category]*wireCategory{}
	l.decode(tree, "", w, nil)
	p.defaultRule = Rule{Name: "default", Pos: Position{File: l.file}}
	switch _, ok := tree["version"]; {
	case !ok:
		l.errs = append(l.errs, &Error{Pos: Position{File: l.file, Line: 1, Col: 1}, Path: "version",
			Msg: "required: the first line of a policy is version = 1"})
	case w.Version != int64(1):
		l.errf("version", "unsupported version %v: this airlock reads version = 1", w.Version)
	}
	if w.Description != nil {
		p.description = *w.Description
	}
	p.mode = ModeEnforce
	if w.Mode != nil {
		p.mode = Mode(*w.Mode)
	}
	p.modeRule = l.rule("mode")
	l.dnsSection(p, w.DNS)
	l.denySection(p, w.Deny)
	l.categories(p, w.Categories)
	l.testsSection(p, &w.Tests)
}

// modeByName and blockByName are the words mode and dns.block take (the
// JSON Schema is generated from them too, schema.go).
var (
	modeByName  = map[string]Mode{"enforce": ModeEnforce, "audit": ModeAudit}
	blockByName = map[string]BlockAnswer{"nxdomain": BlockNXDomain, "refused": BlockRefused}
)

var defaultQTypes = []uint16{1, 28, 5, 65, 64, 15, 33} // A AAAA CNAME HTTPS SVCB MX SRV

func (l *loader) dnsSection(p *Policy, w *wireDNS) {
	d := DNSConfig{MaxLabel: 63, MaxName: 253, QTypes: defaultQTypes}
	p.dnsRules = dnsRules{qtypes: l.rule("dns.qtypes"), maxLabel: l.rule("dns.max_label"), maxName: l.rule("dns.max_name")}
	if w == nil {
		p.dns = d
		return
	}
	for i, u := range w.Upstreams.vals {
		ap, err := netip.ParseAddrPort(u)
		if err != nil {
			l.errf(w.Upstreams.paths[i], "want an address and port such as \"198.18.0.53:53\": %v", err)
			continue
		}
		d.Upstreams = append(d.Upstreams, ap.String())
	}
	if w.Block != nil {
		d.Block = BlockAnswer(*w.Block)
	}
	if n, ok := l.inRange(w.MaxLabel, "dns.max_label", 1, 63); ok {
		d.MaxLabel = n
	}
	if n, ok := l.inRange(w.MaxName, "dns.max_name", 1, 253); ok {
		d.MaxName = n
	}
	if n, ok := l.inRange(w.QueriesPerMinute, "dns.queries_per_minute", 0, 1<<31-1); ok {
		d.QueriesPerMinute = n
	}
	if n, ok := l.inRange(w.QueriesPerSecond, "dns.queries_per_second", 0, 1<<31-1); ok {
		d.QueriesPerSecond = n
	}
	if d.QueriesPerSecond > 0 && d.QueriesPerMinute > 0 && d.QueriesPerSecond > d.QueriesPerMinute {
		l.errf("dns.queries_per_second", "%d is above queries_per_minute (%d): the per-minute cap would always trip first", d.QueriesPerSecond, d.QueriesPerMinute)
	}
	if n, ok := l.inRange(w.NamesPerParent, "dns.names_per_parent", 0, 1<<31-1); ok {
		d.NamesPerParent = n
	}
	if w.QTypes.set {
		d.QTypes = l.qtypes(&w.QTypes)
	}
	p.dns = d
}

// inRange returns *n when it is written and within [lo, hi].
func (l *loader) inRange(n *int64, path string, lo, hi int64) (int, bool) {
	if n == nil {
		return 0, false
	}
	if *n < lo || *n > hi {
		l.errf(path, "%d is out of range [%d, %d]", *n, lo, hi)
		return 0, false
	}
	return int(*n), true
}

// metaQTypes are the types no policy can allow: they are not questions a
// recursive resolver forwards (the resolver refuses them for every sandbox).
// Everything else, ANY and NULL included, is allowed only when a policy lists
// it, so the policy alone decides which types are answered.
var metaQTypes = map[uint16]string{
	41:  "OPT, an EDNS pseudo-record",
	249: "TKEY, a transaction key meta-type",
	250: "TSIG, a transaction signature meta-type",
	251: "IXFR, a zone transfer",
	252: "AXFR, a zone transfer",
	253: "MAILB, an obsolete meta-type",
	254: "MAILA, an obsolete meta-type",
}

func (l *loader) qtypes(list *strs) []uint16 {
	names, paths := list.vals, list.paths
	out := []uint16{}
	for i, n := range names {
		t, ok := ParseQType(n)
		if !ok {
			l.errf(paths[i], "unknown DNS query type %q", n)
			continue
		}
		if why := metaQTypes[t]; why != "" {
			l.errf(paths[i], "%q is %s: the resolver never forwards it for a sandbox", n, why)
			continue
		}
		out = append(out, t)
	}
	return out
}

func (l *loader) denySection(p *Policy, w *wireDeny) {
	p.denyHosts = newHostIndex()
	if w == nil {
		return
	}
	p.denyPos = l.pos("deny")
	hosts, paths := w.Hosts.vals, w.Hosts.paths
	seen := map[string]string{}
	for i, h := range hosts {
		pat, wild, err := parseHostPattern(h)
		if err != nil {
			l.errf(paths[i], "%q: %v", h, err)
			continue
		}
		if prev, dup := seen[pat]; dup {
			l.errf(paths[i], "%q repeats %s", h, prev)
			continue
		}
		seen[pat] = paths[i]
		_ = p.denyHosts.add(&hostRule{pattern: pat, wildcard: wild, rule: l.rule(paths[i]),
			reason: "host " + pat + " is listed in [deny]"})
	}
	for _, c := range l.cidrs(&w.CIDRs) {
		c.reason = "address in " + c.prefix.String() + " is listed in [deny]"
		p.denyCIDRs = append(p.denyCIDRs, c)
	}
}

// cidrs parses a cidrs list: canonical prefixes, or single addresses.
func (l *loader) cidrs(list *strs) []*cidrRule {
	vals, paths := list.vals, list.paths
	var out []*cidrRule
	for i, s := range vals {
		pfx, err := parseCIDR(s)
		if err != nil {
			l.errf(paths[i], "%q: %v", s, err)
			continue
		}
		out = append(out, &cidrRule{prefix: pfx, rule: l.rule(paths[i])})
	}
	return out
}

func parseCIDR(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			if looksLikeName(s) {
				return netip.Prefix{}, errors.New("cidrs take addresses, not names; put names in hosts")
			}
			return netip.Prefix{}, fmt.Errorf("not a CIDR prefix: %v", err)
		}
		if pfx.Masked() != pfx {
			return netip.Prefix{}, fmt.Errorf("prefix has host bits set; write %s", pfx.Masked())
		}
		return pfx, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		if looksLikeName(s) {
			return netip.Prefix{}, errors.New("cidrs take addresses, not names; put names in hosts")
		}
		return netip.Prefix{}, fmt.Errorf("not an address or CIDR prefix: %v", err)
	}
	if a.Zone() != "" {
		return netip.Prefix{}, errIPZone
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func looksLikeName(s string) bool {
	s, _, _ = strings.Cut(s, "/")
	if strings.Contains(s, ":") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i] | 0x20; c >= 'g' && c <= 'z' {
			return true
		}
	}
	return false
}

func (l *loader) categories(p *Policy, m map[string]any) {
	p.hosts = newHostIndex()
	p.catByName = map[string]*Category{}
	if m == nil {
		return
	}
	names := make([]string, 0, len(m))
	total := 0
	for k, v := range m {
		names = append(names, k)
		if cm, ok := v.(map[string]any); ok {
			if hs, ok := cm["hosts"].([]any); ok {
				total += len(hs)
			}
		}
	}
	sort.Strings(names)
	p.hosts.exact = make(map[string]*hostRule, total)
	for _, name := range names {
		path := tomlpos.Join("categories", name)
		cm, isTable := m[name].(map[string]any)
		if !isTable {
			l.errf(path, "want a table ([%s]), got %s", path, tomlType(m[name]))
			continue
		}
		c := l.category(p, name, path, cm)
		p.cats = append(p.cats, c)
		p.catByName[name] = c
		for _, hr := range c.r.hosts {
			if prev := p.hosts.add(hr); prev != nil {
				l.errf(hr.rule.Name, "%q repeats %s", hr.pattern, prev.rule.Name)
			}
		}
		p.cidrs = append(p.cidrs, c.r.cidrs...)
	}
	sort.SliceStable(p.cidrs, func(i, j int) bool { return p.cidrs[i].prefix.Bits() > p.cidrs[j].prefix.Bits() })
	sort.SliceStable(p.denyCIDRs, func(i, j int) bool { return p.denyCIDRs[i].prefix.Bits() > p.denyCIDRs[j].prefix.Bits() })
}

// Name is the policy file's base name without ".toml".
func (p *Policy) Name() string { return p.name }

// File is the path the policy was loaded from.
func (p *Policy) File() string { return p.file }

// Hash is the hex SHA-256 of the policy's source bytes.
func (p *Policy) Hash() string { return p.hash }

// Description is the policy's optional description.
func (p *Policy) Description() string { return p.description }

// Mode is the policy's mode (a category may override it).
func (p *Policy) Mode() Mode { return p.mode }

// DNS is the [dns] section with defaults applied.
func (p *Policy) DNS() DNSConfig { return p.dns }

// Categories returns the compiled categories, sorted by name.
func (p *Policy) Categories() []*Category { return p.cats }

// Category returns the category of that name.
func (p *Policy) Category(name string) (*Category, bool) {
	c, ok := p.catByName[name]
	return c, ok
}

// Tests returns the policy's embedded [[tests]].
func (p *Policy) Tests() []TestCase { return p.tests }
