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
		p.warnings = l.lint(p, tree, data)
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

var topKeys = []string{"version", "mode", "description", "dns", "deny", "categories", "tests"}

func (l *loader) policy(p *Policy, tree map[string]any) {
	l.known(tree, "", topKeys...)
	p.defaultRule = Rule{Name: "default", Pos: Position{File: l.file}}
	switch v, ok := tree["version"]; {
	case !ok:
		l.errs = append(l.errs, &Error{Pos: Position{File: l.file, Line: 1, Col: 1}, Path: "version",
			Msg: "required: the first line of a policy is version = 1"})
	case v != int64(1):
		l.errf("version", "unsupported version %v: this airlock reads version = 1", v)
	}
	p.description, _ = l.str(tree, "description", "")
	p.mode = l.mode(tree, "", ModeEnforce)
	p.modeRule = l.rule("mode")
	l.dnsSection(p, tree)
	l.denySection(p, tree)
	l.categories(p, tree)
	l.testsSection(p, tree)
}

func (l *loader) mode(m map[string]any, path string, def Mode) Mode {
	s, ok := l.str(m, "mode", path)
	if !ok {
		return def
	}
	if m, ok := modeByName[s]; ok {
		return m
	}
	l.errf(joinPath(path, "mode"), "unknown mode %q (want \"enforce\" or \"audit\")", s)
	return def
}

// modeByName and blockByName are the words mode and dns.block take (the
// JSON Schema is generated from them too, schema.go).
var (
	modeByName  = map[string]Mode{"enforce": ModeEnforce, "audit": ModeAudit}
	blockByName = map[string]BlockAnswer{"nxdomain": BlockNXDomain, "refused": BlockRefused}
)

var denyKeys = []string{"hosts", "cidrs"}

var dnsKeys = []string{"upstreams", "block", "max_label", "max_name", "queries_per_minute", "queries_per_second", "names_per_parent", "qtypes"}

var defaultQTypes = []uint16{1, 28, 5, 65, 64, 15, 33} // A AAAA CNAME HTTPS SVCB MX SRV

func (l *loader) dnsSection(p *Policy, tree map[string]any) {
	d := DNSConfig{MaxLabel: 63, MaxName: 253, QTypes: defaultQTypes}
	p.dnsRules = dnsRules{qtypes: l.rule("dns.qtypes"), maxLabel: l.rule("dns.max_label"), maxName: l.rule("dns.max_name")}
	m, ok := l.table(tree, "dns", "")
	if !ok {
		p.dns = d
		return
	}
	l.known(m, "dns", dnsKeys...)
	ups, paths, _ := l.strList(m, "upstreams", "dns")
	for i, u := range ups {
		ap, err := netip.ParseAddrPort(u)
		if err != nil {
			l.errf(paths[i], "want an address and port such as \"198.18.0.53:53\": %v", err)
			continue
		}
		d.Upstreams = append(d.Upstreams, ap.String())
	}
	if s, ok := l.str(m, "block", "dns"); ok {
		if b, ok := blockByName[s]; ok {
			d.Block = b
		} else {
			l.errf("dns.block", "unknown answer %q (want \"nxdomain\" or \"refused\")", s)
		}
	}
	if n, ok := l.integer(m, "max_label", "dns", 1, 63); ok {
		d.MaxLabel = int(n)
	}
	if n, ok := l.integer(m, "max_name", "dns", 1, 253); ok {
		d.MaxName = int(n)
	}
	if n, ok := l.integer(m, "queries_per_minute", "dns", 0, 1<<31-1); ok {
		d.QueriesPerMinute = int(n)
	}
	if n, ok := l.integer(m, "queries_per_second", "dns", 0, 1<<31-1); ok {
		d.QueriesPerSecond = int(n)
	}
	if d.QueriesPerSecond > 0 && d.QueriesPerMinute > 0 && d.QueriesPerSecond > d.QueriesPerMinute {
		l.errf("dns.queries_per_second", "%d is above queries_per_minute (%d): the per-minute cap would always trip first", d.QueriesPerSecond, d.QueriesPerMinute)
	}
	if n, ok := l.integer(m, "names_per_parent", "dns", 0, 1<<31-1); ok {
		d.NamesPerParent = int(n)
	}
	if _, present := m["qtypes"]; present {
		d.QTypes = l.qtypes(m, "qtypes", "dns")
	}
	p.dns = d
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

func (l *loader) qtypes(m map[string]any, key, path string) []uint16 {
	names, paths, _ := l.strList(m, key, path)
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

func (l *loader) denySection(p *Policy, tree map[string]any) {
	p.denyHosts = newHostIndex()
	m, ok := l.table(tree, "deny", "")
	if !ok {
		return
	}
	l.known(m, "deny", denyKeys...)
	p.denyPos = l.pos("deny")
	hosts, paths, _ := l.strList(m, "hosts", "deny")
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
	for _, c := range l.cidrs(m, "deny") {
		c.reason = "address in " + c.prefix.String() + " is listed in [deny]"
		p.denyCIDRs = append(p.denyCIDRs, c)
	}
}

// cidrs parses a cidrs list: canonical prefixes, or single addresses.
func (l *loader) cidrs(m map[string]any, path string) []*cidrRule {
	vals, paths, _ := l.strList(m, "cidrs", path)
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

func (l *loader) categories(p *Policy, tree map[string]any) {
	p.hosts = newHostIndex()
	p.catByName = map[string]*Category{}
	m, ok := l.table(tree, "categories", "")
	if !ok {
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
		path := joinPath("categories", name)
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
