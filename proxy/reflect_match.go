package proxy

import (
	"bytes"
	"strings"
)

// secretPattern is one form of a secret value to find in a response and
// what to write in its place.
type secretPattern struct {
	name string // the secret's name (for the event; never its value)
	find []byte // the value as it may appear (raw, JSON- or URL-escaped)
	repl []byte // what the sandbox gets instead (the placeholder)
}

// matcher replaces secret values in a stream given in pieces of any size:
// a value split across two pieces is still found, because the last
// maxLen-1 bytes of each piece (where a value may start without ending)
// are held back until the next piece or the end. It holds no more than
// that: its memory is bounded by the longest pattern, not by the stream.
type matcher struct {
	pats   []secretPattern
	maxLen int
	carry  []byte // held-back input, shorter than maxLen
	win    []byte // carry and the next piece, reused
	off    int64  // stream offset of carry[0]
	// hit is called for each value replaced, with its offset in the
	// input stream.
	hit func(name string, off int64)
}

func newMatcher(pats []secretPattern, hit func(string, int64)) *matcher {
	m := &matcher{pats: pats, hit: hit}
	for _, p := range pats {
		m.maxLen = max(m.maxLen, len(p.find))
	}
	return m
}

// feed appends to dst what of p (after what was held back) can be
// released, with every complete value replaced; final releases all. The
// result is the same however the stream is cut: at each place, the
// earliest value wins, then the longest.
func (m *matcher) feed(dst, p []byte, final bool) []byte {
	w := p
	if len(m.carry) > 0 {
		m.win = append(append(m.win[:0], m.carry...), p...)
		w = m.win
	}
	i := 0
	for {
		at, k := m.next(w[i:])
		if k < 0 || !final && i+at+m.maxLen > len(w) {
			// None, or one that a longer value starting at the same
			// place might still win over: decided with more input.
			break
		}
		dst = append(dst, w[i:i+at]...)
		dst = append(dst, m.pats[k].repl...)
		if m.hit != nil {
			m.hit(m.pats[k].name, m.off+int64(i+at))
		}
		i += at + len(m.pats[k].find)
	}
	keep := 0
	if !final && m.maxLen > 1 {
		keep = min(len(w)-i, m.maxLen-1)
	}
	end := len(w) - keep
	dst = append(dst, w[i:end]...)
	m.off += int64(end)
	m.carry = append(m.carry[:0], w[end:]...) // w is p or win, never carry
	return dst
}

// next returns the offset and index of the earliest (then longest)
// pattern in b, or k < 0.
func (m *matcher) next(b []byte) (at, k int) {
	at, k = -1, -1
	for j, p := range m.pats {
		if len(p.find) == 0 {
			continue
		}
		n := bytes.Index(b, p.find)
		if n < 0 {
			continue
		}
		if at < 0 || n < at || n == at && len(p.find) > len(m.pats[k].find) {
			at, k = n, j
		}
	}
	return at, k
}

// replaceAll replaces every pattern in s at once (a header value),
// calling hit for each; it returns s itself when nothing matched.
func replaceAll(pats []secretPattern, s string, hit func(name string, off int64)) string {
	found := false
	for _, p := range pats {
		if len(p.find) > 0 && strings.Contains(s, string(p.find)) {
			found = true
			break
		}
	}
	if !found {
		return s
	}
	return string(newMatcher(pats, hit).feed(nil, []byte(s), true))
}
