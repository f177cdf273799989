package policies

import (
	"errors"
	"strings"
	"unicode/utf8"
)

var (
	errPathStart   = errors.New("path must start with \"/\"")
	errPercent     = errors.New("invalid percent-encoding in path")
	errPathTooBig  = errors.New("path longer than 8192 bytes")
	errDoubleEnc   = errors.New("percent-encoded escape in path (%25 followed by hex digits): servers decode it differently")
	errPathNUL     = errors.New("NUL byte (%00) in path")
	errPathUTF8    = errors.New("path is not valid UTF-8 once decoded (an overlong or broken sequence)")
	errPathConfuse = errors.New("path holds a character that some servers read as '.' or '/' (fullwidth or other look-alike dot or slash)")
	errPathDotDot  = errors.New("path ends in a \"..\" segment: servers resolve it differently")
)

const maxPath = 8192

// NormalizePath returns the form of a request path that rules match on:
// percent-encoded unreserved characters decoded (%41 -> A, %2e -> .), other
// escapes in upper case (%2f -> %2F, never decoded), other bytes outside
// the URI path alphabet percent-encoded, "." and ".." segments resolved
// (also "..;" and ".;" as some servers read them), runs of "/" collapsed.
// A trailing slash is kept. The path must start with "/".
//
// A path that servers may read in more than one way is an error, not a
// normal form: a percent-encoded escape ("%252e"), a NUL byte, bytes that
// are not UTF-8 once decoded (overlong forms such as "%C0%AE"), look-alike
// dots and slashes (U+FF0E, U+2024...) and a final ".." segment.
func NormalizePath(p string) (string, error) {
	if p == "" {
		return "/", nil
	}
	if len(p) > maxPath {
		return "", errPathTooBig
	}
	if p[0] != '/' {
		return "", errPathStart
	}
	if isNormalPath(p) {
		return p, nil
	}
	dec, err := decodeUnreserved(p)
	if err != nil {
		return "", err
	}
	if hasDoubleEnc(dec) {
		return "", errDoubleEnc
	}
	if err := checkDecoded(p); err != nil {
		return "", err
	}
	if endsInDotDot(dec) {
		return "", errPathDotDot
	}
	return cleanSegments(dec), nil
}

// confusables are characters that servers (or the file systems behind
// them) fold into '.', '/' or '\\'.
var confusables = []rune{
	'\uFF0E', '\uFE52', '\u2024', '\u2025', '\u3002', '\uFF61', // dots
	'\uFF0F', '\u2215', '\u2044', '\u29F8', // slashes
	'\uFF3C', '\uFE68', '\u29F9', '\u2216', // backslashes
}

// checkDecoded refuses a path whose bytes, with every escape decoded
// once, are not UTF-8 or hold a look-alike dot or slash. Only paths with
// a byte or escape outside ASCII get here with something to check.
func checkDecoded(p string) error {
	if !hasNonASCII(p) {
		return nil
	}
	d := decodeOnce(p)
	if !utf8.ValidString(d) {
		return errPathUTF8
	}
	for _, r := range d {
		for _, c := range confusables {
			if r == c {
				return errPathConfuse
			}
		}
	}
	return nil
}

// hasNonASCII: a raw byte >= 0x80 or an escape of one (%8x-%Fx).
func hasNonASCII(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] >= 0x80 || p[i] == '%' && i+1 < len(p) && strings.IndexByte("89abcdefABCDEF", p[i+1]) >= 0 {
			return true
		}
	}
	return false
}

// decodeOnce decodes every well-formed escape once.
func decodeOnce(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			h, ok1 := unhex(s[i+1])
			l, ok2 := unhex(s[i+2])
			if ok1 && ok2 {
				b.WriteByte(h<<4 | l)
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// hasDoubleEnc: the decoded form holds "%25" followed by two hex digits,
// however they were spelled ("%2541", or "%25" then "%34%31" that decode
// to "41"), which a server that decodes twice reads as another byte.
func hasDoubleEnc(dec string) bool {
	for i := strings.Index(dec, "%25"); i >= 0; {
		if i+4 < len(dec) && isHex(dec[i+3]) && isHex(dec[i+4]) {
			return true
		}
		j := strings.Index(dec[i+3:], "%25")
		if j < 0 {
			return false
		}
		i += 3 + j
	}
	return false
}

// endsInDotDot: the last segment of a decoded path is ".." (or "..;x").
func endsInDotDot(p string) bool {
	last := p[strings.LastIndexByte(p, '/')+1:]
	_, dotdot := isDotSeg(last)
	return dotdot
}

func isUnreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// isPathChar: characters that may stand unencoded in a path.
func isPathChar(c byte) bool {
	return isUnreserved(c) || strings.IndexByte("/!$&'()*+,;=:@", c) >= 0
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func isHex(c byte) bool {
	_, ok := unhex(c)
	return ok
}

const upperHex = "0123456789ABCDEF"

func decodeUnreserved(p string) (string, error) {
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '%' {
			if i+2 >= len(p) {
				return "", errPercent
			}
			h, ok1 := unhex(p[i+1])
			l, ok2 := unhex(p[i+2])
			if !ok1 || !ok2 {
				return "", errPercent
			}
			v := h<<4 | l
			if v == 0 {
				return "", errPathNUL
			}
			if isUnreserved(v) {
				b.WriteByte(v)
			} else {
				b.WriteByte('%')
				b.WriteByte(upperHex[v>>4])
				b.WriteByte(upperHex[v&15])
			}
			i += 2
			continue
		}
		if c == 0 {
			return "", errPathNUL
		}
		if !isPathChar(c) {
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

// isNormalPath reports, without allocating, whether p is already in normal
// form: only plain path characters, no escapes, no empty segments and no
// segment starting with a dot.
func isNormalPath(p string) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '/' {
			if i+1 < len(p) && (p[i+1] == '/' || p[i+1] == '.') {
				return false
			}
			continue
		}
		if c == '%' || !isPathChar(c) {
			return false
		}
	}
	return true
}

func isDotSeg(s string) (dot, dotdot bool) {
	if i := strings.IndexByte(s, ';'); i >= 0 {
		s = s[:i]
	}
	return s == ".", s == ".."
}

func cleanSegments(p string) string {
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	trailing := false
	for i, s := range segs {
		last := i == len(segs)-1
		dot, dotdot := isDotSeg(s)
		switch {
		case s == "":
			if last {
				trailing = true
			}
			continue
		case dot:
			trailing = last
			continue
		case dotdot:
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			trailing = last
			continue
		}
		out = append(out, s)
		trailing = false
	}
	res := "/" + strings.Join(out, "/")
	if trailing && len(out) > 0 {
		res += "/"
	}
	return res
}

// decodeAll percent-decodes every escape, repeatedly (up to three rounds),
// for matching that must see through any spelling. Bad escapes stay as is.
func decodeAll(s string) string {
	for round := 0; round < 3 && strings.IndexByte(s, '%') >= 0; round++ {
		d := decodeOnce(s) // each decoded escape shortens it
		if len(d) == len(s) {
			break
		}
		s = d
	}
	return s
}

// pathPattern is a route path: literal segments, "*" for exactly one
// segment, "**" (last only) for any rest, including nothing.
type pathPattern struct {
	raw  string
	segs []string
	rest bool // ends in "/**"
}

func parsePathPattern(s string) (pathPattern, error) {
	if s == "" || s[0] != '/' {
		return pathPattern{}, errPathStart
	}
	n, err := NormalizePath(s)
	if err != nil {
		return pathPattern{}, err
	}
	if n != s {
		return pathPattern{}, errors.New("path pattern is not in normal form; write " + n)
	}
	pp := pathPattern{raw: s}
	if s == "/" {
		return pp, nil
	}
	segs := strings.Split(s[1:], "/")
	for i, seg := range segs {
		if seg == "**" {
			if i != len(segs)-1 {
				return pathPattern{}, errors.New("\"**\" is only allowed as the last segment")
			}
			pp.rest = true
			segs = segs[:i]
			break
		}
		if strings.Contains(seg, "*") && seg != "*" {
			return pathPattern{}, errors.New("\"*\" must be a whole segment")
		}
	}
	pp.segs = segs
	return pp, nil
}

// match reports whether a normalized path matches. Segments holding an
// encoded slash or backslash never match a wildcard.
func (pp *pathPattern) match(path string) bool {
	if !pp.rest && len(pp.segs) == 0 {
		return path == "/"
	}
	rest := path[1:]
	for i, seg := range pp.segs {
		var cur string
		j := strings.IndexByte(rest, '/')
		last := j < 0
		if last {
			cur, rest = rest, ""
		} else {
			cur, rest = rest[:j], rest[j+1:]
		}
		if seg == "*" {
			if cur == "" || hasEncodedSep(cur) {
				return false
			}
		} else if cur != seg {
			return false
		}
		if last && i != len(pp.segs)-1 {
			return false
		}
		if !last && i == len(pp.segs)-1 && !pp.rest {
			// a trailing slash only matches a pattern that ends in one
			return rest == "" && strings.HasSuffix(pp.raw, "/")
		}
	}
	if pp.rest {
		return !hasEncodedSep(rest)
	}
	return rest == ""
}

func hasEncodedSep(s string) bool {
	return strings.Contains(s, "%2F") || strings.Contains(s, "%5C")
}
