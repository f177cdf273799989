package audit

import (
	"fmt"
	"net"
	"path"
	"strconv"
	"strings"
	"time"
)

// Filter selects events the way `airlock logs` does: within a field the
// values are alternatives (any may match), fields combine with AND, and
// every field has a negated form (Not) that no value may match. Unlike
// Query it works on any source (the store, JSONL files, the control API):
// Match decides on a decoded event, and Pushdown gives the part a store or
// the API can do for it.
type Filter struct {
	Match        Fields
	Not          Fields
	Since, Until time.Time
}

// Fields are the filterable fields, each a list of alternatives.
type Fields struct {
	Sandbox   []string // an id or a prefix of one
	Kind      []string
	Verdict   []string // allow | deny | ask | audit | would_deny
	Category  []string
	Rule      []string // a rule name, with or without " (file:line:col)"
	Host      []string // glob, case-insensitive
	Method    []string // http method, case-insensitive
	Path      []string // http path glob; a trailing "/**" matches everything below
	Port      []string // N or LO-HI: the destination port
	Status    []string // http status: 404, or a class like 4xx
	Package   []string // package name glob, or ECOSYSTEM:NAME
	ExecID    []string // exec id: exec records only, until events carry one
	Principal []string // the principal a refusal, lifecycle or exec record names
}

// fieldNames names Fields' members for errors, in order.
func (f *Fields) each(fn func(name string, vals []string) error) error {
	for _, kv := range []struct {
		n string
		v []string
	}{{"sandbox", f.Sandbox}, {"kind", f.Kind}, {"verdict", f.Verdict}, {"category", f.Category},
		{"rule", f.Rule}, {"host", f.Host}, {"method", f.Method}, {"path", f.Path}, {"port", f.Port},
		{"status", f.Status}, {"package", f.Package}, {"exec", f.ExecID}, {"principal", f.Principal}} {
		if err := fn(kv.n, kv.v); err != nil {
			return err
		}
	}
	return nil
}

var (
	filterKinds    = []string{"dns", "flow", "http", "drop", "exec", "lifecycle", "policy", "approval", "gap", "audit_error", "secret_reflected", "lockdown", "refusal", "preview", "ingress"}
	filterVerdicts = []string{"allow", "deny", "ask", "audit", "would_deny"}
)

// Validate checks every value, naming the flag (prefix "not-" for Not).
func (f *Filter) Validate() error {
	for _, side := range []struct {
		pre string
		fs  *Fields
	}{{"", &f.Match}, {"not-", &f.Not}} {
		err := side.fs.each(func(name string, vals []string) error {
			for _, v := range vals {
				if err := validateValue(name, v); err != nil {
					return fmt.Errorf("--%s%s %q: %w", side.pre, name, v, err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return fmt.Errorf("--until (%s) is not after --since (%s)", f.Until.Format(time.RFC3339), f.Since.Format(time.RFC3339))
	}
	return nil
}

func validateValue(name, v string) error {
	if v == "" {
		return fmt.Errorf("empty value")
	}
	switch name {
	case "kind":
		return oneOf(v, filterKinds)
	case "verdict":
		return oneOf(normVerdict(v), filterVerdicts)
	case "host", "path", "package":
		if _, err := path.Match(v, ""); err != nil {
			return fmt.Errorf("bad glob: %w", err)
		}
	case "port":
		_, _, err := ParsePortRange(v)
		return err
	case "status":
		_, _, err := parseStatus(v)
		return err
	}
	return nil
}

func oneOf(v string, set []string) error {
	for _, s := range set {
		if v == s {
			return nil
		}
	}
	return fmt.Errorf("want one of %s", strings.Join(set, ", "))
}

func normVerdict(v string) string { return strings.ReplaceAll(strings.ToLower(v), "-", "_") }

// ParsePortRange reads N or LO-HI (1..65535).
func ParsePortRange(s string) (lo, hi uint16, err error) {
	a, b, isRange := strings.Cut(s, "-")
	if lo, err = parseFilterPort(a); err != nil {
		return 0, 0, err
	}
	if !isRange {
		return lo, lo, nil
	}
	if hi, err = parseFilterPort(b); err != nil {
		return 0, 0, err
	}
	if hi < lo {
		return 0, 0, fmt.Errorf("range %d-%d runs backwards", lo, hi)
	}
	return lo, hi, nil
}

func parseFilterPort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("want a port 1..65535 or a range LO-HI, got %q", s)
	}
	return uint16(n), nil
}

// parseStatus reads 404 or a class such as 4xx, as a range.
func parseStatus(s string) (lo, hi int, err error) {
	if len(s) == 3 && strings.HasSuffix(strings.ToLower(s), "xx") && s[0] >= '1' && s[0] <= '5' {
		c := int(s[0]-'0') * 100
		return c, c + 99, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 100 || n > 599 {
		return 0, 0, fmt.Errorf("want a status 100..599 or a class such as 4xx")
	}
	return n, n, nil
}

// Matches reports whether e passes the filter.
func (f *Filter) Matches(e *Event) bool {
	if !f.Since.IsZero() && e.Time.Before(f.Since) || !f.Until.IsZero() && !e.Time.Before(f.Until) {
		return false
	}
	ok := true
	_ = f.Match.each(func(name string, vals []string) error {
		if len(vals) > 0 && !anyMatch(name, vals, e) {
			ok = false
		}
		return nil
	})
	if !ok {
		return false
	}
	_ = f.Not.each(func(name string, vals []string) error {
		if anyMatch(name, vals, e) {
			ok = false
		}
		return nil
	})
	return ok
}

func anyMatch(name string, vals []string, e *Event) bool {
	for _, v := range vals {
		if fieldMatches(name, v, e) {
			return true
		}
	}
	return false
}

func fieldMatches(name, v string, e *Event) bool {
	switch name {
	case "sandbox":
		return e.Sandbox != "" && strings.HasPrefix(e.Sandbox, v)
	case "kind":
		return string(e.Kind) == v
	case "verdict":
		return verdictMatches(normVerdict(v), e)
	case "category":
		return e.Category == v
	case "rule":
		return e.Rule == v || strings.HasPrefix(e.Rule, v+" (")
	case "host":
		return globFold(v, strings.TrimSuffix(Host(e), "."), true)
	case "method":
		return e.HTTP != nil && strings.EqualFold(e.HTTP.Method, v)
	case "path":
		return e.HTTP != nil && pathMatches(v, e.HTTP.Path)
	case "port":
		return portMatches(v, e)
	case "status":
		lo, hi, err := parseStatus(v)
		return err == nil && e.HTTP != nil && e.HTTP.Status >= lo && e.HTTP.Status <= hi
	case "package":
		return packageMatches(v, e)
	case "exec":
		return e.Kind == KindExec && e.ID == v
	}
	return name == "principal" && principalOf(e) == v
}

// principalOf is the principal a record names: the one refused, or the one
// whose request made a lifecycle or exec record.
func principalOf(e *Event) string {
	switch {
	case e.Refusal != nil:
		return e.Refusal.Principal
	case e.Lifecycle != nil:
		return e.Lifecycle.Principal
	case e.Exec != nil:
		return e.Exec.Principal
	}
	return ""
}

func verdictMatches(v string, e *Event) bool {
	if v == "would_deny" {
		return e.WouldDeny
	}
	return e.Verdict == v
}

func globFold(pattern, s string, needValue bool) bool {
	if needValue && s == "" {
		return false
	}
	ok, _ := path.Match(strings.ToLower(strings.TrimSuffix(pattern, ".")), strings.ToLower(s))
	return ok
}

func pathMatches(pattern, p string) bool {
	if base, ok := strings.CutSuffix(pattern, "/**"); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	m, _ := path.Match(pattern, p)
	return m
}

func packageMatches(v string, e *Event) bool {
	if e.HTTP == nil || e.HTTP.Package == nil {
		return false
	}
	p := e.HTTP.Package
	if eco, name, ok := strings.Cut(v, ":"); ok {
		return strings.EqualFold(eco, p.Ecosystem) && globFold(name, p.Name, true)
	}
	return globFold(v, p.Name, true)
}

func portMatches(v string, e *Event) bool {
	lo, hi, err := ParsePortRange(v)
	if err != nil {
		return false
	}
	p := DestPort(e)
	return p != 0 && p >= lo && p <= hi
}

// DestPort is the destination port an event names, 0 when none: a flow's
// original (or dialed) destination, an http request's host port or its
// scheme's default, a drop's port, 53 for a DNS query.
func DestPort(e *Event) uint16 {
	switch {
	case e.Flow != nil:
		return portOf(firstNonEmpty(e.Flow.OrigDst, e.Flow.Dialed))
	case e.HTTP != nil:
		if p := portOf(e.HTTP.Host); p != 0 {
			return p
		}
		switch e.HTTP.Scheme {
		case "https":
			return 443
		case "http":
			return 80
		}
	case e.Drop != nil:
		return e.Drop.Port
	case e.DNS != nil:
		return 53
	}
	return 0
}

func portOf(hostport string) uint16 {
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return 0
	}
	return uint16(n)
}

// Pushdown is the part of the filter a Query can do: the time bounds, and
// each field the store filters the same way when it has one value and no
// negation. The events it selects are a superset of Matches'; apply
// Matches to them. exact reports whether Matches adds nothing (then a
// limit may be pushed down too).
func (f *Filter) Pushdown() (q Query, exact bool) {
	q = Query{Since: f.Since, Until: f.Until}
	exact = true
	one := func(vals []string, dst *string) {
		if len(vals) == 1 {
			*dst = vals[0]
		} else if len(vals) > 1 {
			exact = false
		}
	}
	var kind string
	one(f.Match.Kind, &kind)
	q.Kind = Kind(kind)
	one(f.Match.Verdict, &q.Verdict)
	if q.Verdict != "" {
		q.Verdict = normVerdict(q.Verdict)
	}
	one(f.Match.Category, &q.Category)
	one(f.Match.Rule, &q.Rule)
	one(f.Match.Host, &q.Host)
	_ = f.Not.each(func(_ string, vals []string) error {
		exact = exact && len(vals) == 0
		return nil
	})
	for _, vals := range [][]string{f.Match.Sandbox, f.Match.Method, f.Match.Path, f.Match.Port,
		f.Match.Status, f.Match.Package, f.Match.ExecID, f.Match.Principal} {
		exact = exact && len(vals) == 0
	}
	return q, exact
}
