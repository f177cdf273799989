package policies

import (
	"errors"
	"net/netip"
	"strings"

	"golang.org/x/net/idna"
)

const maxHostLen = 253

// hostForm is what a host string turned out to be.
type hostForm uint8

const (
	formName hostForm = iota + 1
	formIP
)

// hostBuf holds a normalized host without allocating.
type hostBuf [maxHostLen + 2]byte

var (
	errEmptyHost   = errors.New("empty host")
	errHostTooLong = errors.New("host name longer than 253 bytes")
	errEmptyLabel  = errors.New("empty label")
	errLabelLong   = errors.New("label longer than 63 bytes")
	errHostChar    = errors.New("invalid character in host name")
	errHyphen      = errors.New("label starts or ends with a hyphen")
	errIPForm      = errors.New("IP address is not in canonical form (dotted decimal, or bracketed IPv6 in RFC 5952 form)")
	errIPZone      = errors.New("IP address with a zone is not allowed")
	errWildcard    = errors.New("wildcard is only allowed as a leading \"*.\"")
)

// NormalizeHost returns the canonical form of a host: lower case, no
// trailing dot, internationalized names as punycode (IDNA lookup profile).
// IP literals are accepted only in canonical form (dotted decimal IPv4;
// IPv6 bare or in brackets, as RFC 5952 writes it) and come back without
// brackets. Anything else — empty labels, bad characters, short or octal or
// hexadecimal IPv4 forms, wildcards — is an error.
func NormalizeHost(s string) (string, error) {
	var buf hostBuf
	n, form, ip, err := canonHost(s, &buf)
	if err != nil {
		return "", err
	}
	if form == formIP {
		return ip.String(), nil
	}
	return string(buf[:n]), nil
}

// canonHost normalizes s into buf. For names it returns the length written;
// for IP literals the address. It does not allocate for ASCII input.
func canonHost(s string, buf *hostBuf) (int, hostForm, netip.Addr, error) {
	if s == "" {
		return 0, 0, netip.Addr{}, errEmptyHost
	}
	if s[0] == '[' || strings.IndexByte(s, ':') >= 0 {
		ip, err := canonIP6(s, buf)
		return 0, formIP, ip, err
	}
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			a, err := idna.Lookup.ToASCII(s)
			if err != nil {
				return 0, 0, netip.Addr{}, errors.New("invalid internationalized name: " + err.Error())
			}
			if a == s { // nothing changed; avoid recursing forever
				return 0, 0, netip.Addr{}, errHostChar
			}
			return canonHost(a, buf)
		}
	}
	if looksIPv4(s) {
		ip, err := netip.ParseAddr(s)
		if err != nil || !ip.Is4() {
			return 0, 0, netip.Addr{}, errIPForm
		}
		return 0, formIP, ip, nil
	}
	n, err := canonName(s, buf)
	return n, formName, netip.Addr{}, err
}

// looksIPv4 reports whether a host should be read as an IPv4 address: its
// last label is numeric or hexadecimal (as URL parsers do), so "127.1" and
// "0x7f.1" are refused rather than taken for names.
func looksIPv4(s string) bool {
	s = strings.TrimSuffix(s, ".")
	last := s[strings.LastIndexByte(s, '.')+1:]
	if last == "" {
		return false
	}
	if len(last) > 1 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') {
		return true
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}

func canonIP6(s string, buf *hostBuf) (netip.Addr, error) {
	inner := s
	if s[0] == '[' {
		if len(s) < 2 || s[len(s)-1] != ']' {
			return netip.Addr{}, errIPForm
		}
		inner = s[1 : len(s)-1]
	}
	if strings.IndexByte(inner, '%') >= 0 {
		return netip.Addr{}, errIPZone
	}
	ip, err := netip.ParseAddr(inner)
	if err != nil || !ip.Is6() {
		return netip.Addr{}, errIPForm
	}
	if string(ip.AppendTo(buf[:0])) != inner {
		return netip.Addr{}, errIPForm
	}
	return ip, nil
}

// canonName lower-cases an ASCII name into buf, drops one trailing dot and
// checks its labels.
func canonName(s string, buf *hostBuf) (int, error) {
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return 0, errEmptyLabel
	}
	if len(s) > maxHostLen {
		return 0, errHostTooLong
	}
	label := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_':
		case c == '-':
			if label == 0 || i+1 == len(s) || s[i+1] == '.' {
				return 0, errHyphen
			}
		case c == '.':
			if label == 0 {
				return 0, errEmptyLabel
			}
			label = -1
		case c == '*':
			return 0, errWildcard
		default:
			return 0, errHostChar
		}
		label++
		if label > 63 {
			return 0, errLabelLong
		}
		buf[i] = c
	}
	if label == 0 {
		return 0, errEmptyLabel
	}
	return len(s), nil
}

// hostRule is one host pattern of a category or of [deny].
type hostRule struct {
	next     *hostRule // the next rule with the same pattern (a tie)
	pattern  string    // normalized, "*.example.test" for wildcards
	wildcard bool
	cat      *Category // nil for [deny]
	rule     Rule
	reason   string // precomputed so Decide does not allocate
}

// hostIndex finds the most specific patterns matching a name: an exact
// name beats any wildcard, a longer wildcard suffix beats a shorter one.
// Several rules can tie (the same pattern in different categories).
type hostIndex struct {
	exact  map[string]*hostRule
	suffix map[string]*hostRule // "*.example.test" is stored under "example.test"
}

func newHostIndex() *hostIndex {
	return &hostIndex{exact: map[string]*hostRule{}, suffix: map[string]*hostRule{}}
}

// add indexes r. If the same category already has the same pattern, it
// returns that rule and does not add r.
func (ix *hostIndex) add(r *hostRule) *hostRule {
	m, k := ix.exact, r.pattern
	if r.wildcard {
		m, k = ix.suffix, r.pattern[2:]
	}
	cur, ok := m[k]
	if !ok {
		m[k] = r
		return nil
	}
	for {
		if cur.cat == r.cat && cur.pattern == r.pattern {
			return cur
		}
		if cur.next == nil {
			break
		}
		cur = cur.next
	}
	cur.next = r
	return nil
}

// lookup returns the first of the most specific rules for a normalized
// name; ties follow through next.
func (ix *hostIndex) lookup(name []byte) *hostRule {
	if r, ok := ix.exact[string(name)]; ok {
		return r
	}
	if len(ix.suffix) == 0 {
		return nil
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '.' {
			if r, ok := ix.suffix[string(name[i+1:])]; ok {
				return r
			}
		}
	}
	return nil
}

// parseHostPattern checks and normalizes one policy host pattern.
func parseHostPattern(s string) (pattern string, wildcard bool, err error) {
	rest := s
	if strings.HasPrefix(s, "*.") {
		wildcard = true
		rest = s[2:]
	}
	if rest == "" || rest == "*" {
		return "", false, errors.New("a pattern needs a name: \"*\" alone would match everything")
	}
	if strings.IndexByte(rest, '*') >= 0 {
		return "", false, errWildcard
	}
	var buf hostBuf // canonHost drops one trailing dot, as for requests (docs/policy.md)
	n, form, _, err := canonHost(rest, &buf)
	if err == nil && form == formIP {
		return "", false, errors.New("host pattern is an IP address; put addresses in cidrs")
	}
	if err != nil {
		if errors.Is(err, errIPForm) || errors.Is(err, errIPZone) {
			return "", false, errors.New("host pattern looks like an IP address; put addresses in cidrs")
		}
		return "", false, err
	}
	if string(buf[:n]) == rest { // already normal: no copy
		return s, wildcard, nil
	}
	name := string(buf[:n])
	if wildcard {
		return "*." + name, true, nil
	}
	return name, false, nil
}

// hostMatches reports whether a pattern matches a normalized name (slow
// path, for explanations).
func hostMatches(pattern, name string) bool {
	if strings.HasPrefix(pattern, "*.") {
		return strings.HasSuffix(name, pattern[1:]) && len(name) > len(pattern)-1
	}
	return pattern == name
}

// HostPattern is a validated host pattern ("git.example.test" or
// "*.example.test"), usable as a TOML or JSON field type elsewhere in the
// appliance: UnmarshalText normalizes and rejects what a policy would.
type HostPattern string

// UnmarshalText parses and normalizes a host pattern.
func (h *HostPattern) UnmarshalText(b []byte) error {
	pat, _, err := parseHostPattern(string(b))
	if err != nil {
		return err
	}
	*h = HostPattern(pat)
	return nil
}

// MarshalText returns the pattern.
func (h HostPattern) MarshalText() ([]byte, error) { return []byte(h), nil }

// Match reports whether the pattern matches a host name (normalized first;
// a host that does not normalize matches nothing).
func (h HostPattern) Match(host string) bool {
	n, err := NormalizeHost(host)
	if err != nil {
		return false
	}
	return hostMatches(string(h), n)
}
