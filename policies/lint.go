package policies

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"airlock/internal/tomlpos"
)

// Warnings are problems in a policy that loads: it is valid, but a careful
// reviewer would reject it (docs/policy.md, "Warnings"). `airlock policy
// check` prints them; with --strict they fail the check.

// HatchRiskyCIDRs is the per-category key that accepts cidrs reaching the
// whole world, loopback, link-local, the metadata service or IPv4-mapped
// addresses. Its name says what setting it means.
const HatchRiskyCIDRs = "cidrs_reach_host_and_metadata"

// Warnings returns the policy's warnings in file order.
func (p *Policy) Warnings() ErrorList { return p.warnings }

const lintInternalMsg = "internal error in the policy lints"

// linter gathers warnings for one loaded policy.
type linter struct {
	l     *loader
	p     *Policy
	warns ErrorList
}

func (w *linter) warnf(path, format string, args ...any) {
	w.warns = append(w.warns, &Error{Pos: w.l.pos(path), Path: path, Msg: fmt.Sprintf(format, args...)})
}

// lint runs every lint on a policy that loaded without errors. A bug in a
// lint must not refuse a valid policy, so a panic becomes a warning.
func (l *loader) lint(p *Policy, data []byte) (warns ErrorList) {
	w := &linter{l: l, p: p}
	defer func() {
		if r := recover(); r != nil {
			warns = append(w.warns, &Error{Pos: Position{File: l.file, Line: 1, Col: 1},
				Msg: fmt.Sprintf("%s (please report): %v", lintInternalMsg, r)})
		}
	}()
	w.formatChars(data)
	w.hostSpelling()
	w.duplicates()
	w.ties()
	w.tests()
	for _, c := range p.cats {
		w.wildcards(c)
		w.riskyCIDRs(c)
		w.allPorts(c)
		w.routes(c)
	}
	w.warns.sort()
	return w.warns
}

// wire is a category's table as the loader decoded it.
func (w *linter) wire(c *Category) *wireCategory { return w.l.wireCats[c] }

// wildcards: "*.SUFFIX" where SUFFIX is a public suffix matches names
// anyone can register.
func (w *linter) wildcards(c *Category) {
	for _, hr := range c.r.hosts {
		if !hr.wildcard {
			continue
		}
		if suffix := hr.pattern[2:]; isPublicSuffix(suffix) {
			w.warnf(hr.rule.Name, "%q matches every name under the public suffix %q, names anyone can register: list the names the category needs",
				hr.pattern, suffix)
		}
	}
}

// formatChars: bidi controls and invisible format characters anywhere in
// the file can make it read differently from how it is decided.
func (w *linter) formatChars(data []byte) {
	for _, fc := range findFormatChars(data) {
		pos := Position{File: w.l.file, Line: fc.line, Col: fc.col}
		w.warns = append(w.warns, &Error{Pos: pos, Path: w.l.ix.KeyAt(fc.line, fc.col),
			Msg: fmt.Sprintf("U+%04X %s: an invisible character can make the file read differently from how it is decided; remove it", fc.r, fc.name)})
	}
}

// hostSpelling: a host written with non-ASCII letters is matched as its
// A-label; a look-alike letter (Cyrillic "а" for Latin "a") hides in it.
func (w *linter) hostSpelling() {
	check := func(hosts *strs) {
		for i, h := range hosts.vals {
			if !isASCII(h) {
				pat, _, _ := parseHostPattern(h)
				w.warnf(hosts.paths[i], "%q is not ASCII: write its A-label %q, so look-alike letters cannot hide in it", h, pat)
			}
		}
	}
	if d := w.l.wire.Deny; d != nil {
		check(&d.Hosts)
	}
	for _, c := range w.p.cats {
		check(&w.wire(c).Hosts)
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// riskyRanges are address ranges a category's cidrs open only with the
// escape hatch: reaching them from a sandbox is rarely intended.
var riskyRanges = []struct {
	pfx  netip.Prefix
	what string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "the cloud metadata service"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "the cloud metadata service"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local addresses"},
	{netip.MustParsePrefix("fe80::/10"), "link-local addresses"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped addresses"},
}

// CIDRRisk says what a prefix in a category's cidrs reaches that needs
// the escape hatch HatchRiskyCIDRs, or "" when nothing does.
func CIDRRisk(pfx netip.Prefix) string {
	if pfx.Bits() == 0 {
		return "the whole address space (every private, loopback, link-local and metadata address)"
	}
	var what []string
	for _, r := range riskyRanges {
		if pfx.Overlaps(r.pfx) && !contains(what, r.what) {
			what = append(what, r.what)
		}
	}
	return strings.Join(what, ", ")
}

func (w *linter) riskyCIDRs(c *Category) {
	hatchPath := tomlpos.Join(c.r.path, HatchRiskyCIDRs)
	hatch := flag(w.wire(c).RiskyCIDRs, false)
	needed := false
	for _, cr := range c.r.cidrs {
		what := CIDRRisk(cr.prefix)
		if what == "" {
			continue
		}
		needed = true
		if !hatch {
			w.warnf(cr.rule.Name, "%s reaches %s: a sandbox could reach the host or the metadata service; name narrower ranges, or set %s = true if that is the point",
				cr.prefix, what, hatchPath)
		}
	}
	if hatch && !needed {
		w.warnf(hatchPath, "set, but no cidr of %s needs it: remove it", c.r.path)
	}
}

func (w *linter) allPorts(c *Category) {
	if !w.wire(c).Ports.set {
		return
	}
	rs := append([]PortRange(nil), c.Ports...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].Lo < rs[j].Lo })
	next := 1 // the lowest port not yet covered
	for _, r := range rs {
		if int(r.Lo) > next {
			return
		}
		next = max(next, int(r.Hi)+1)
	}
	if next > 65535 {
		w.warnf(tomlpos.Join(c.r.path, "ports"), "covers every port (1-65535): list the ports the category needs")
	}
}
