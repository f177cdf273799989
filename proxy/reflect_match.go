package proxy

import (
	"bytes"
	"slices"
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
	ix     patIndex
	maxLen int
	carry  []byte // held-back input, shorter than maxLen
	win    []byte // carry and the next piece, reused
	off    int64  // stream offset of carry[0]
	// hit is called for each value replaced, with its offset in the
	// input stream.
	hit func(name string, off int64)
}

func newMatcher(pats []secretPattern, hit func(string, int64)) *matcher {
	m := &matcher{pats: pats, ix: newPatIndex(pats), hit: hit}
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
	m.ix.reset()
	i := 0
	for {
		at, k := m.ix.next(m.pats, w, i)
		if k < 0 || !final && at+m.maxLen > len(w) {
			// None, or one that a longer value starting at the same
			// place might still win over: decided with more input.
			break
		}
		dst = append(dst, w[i:at]...)
		dst = append(dst, m.pats[k].repl...)
		if m.hit != nil {
			m.hit(m.pats[k].name, m.off+int64(at))
		}
		i = at + len(m.pats[k].find)
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

// patIndex finds the earliest, then longest, pattern in a window in one
// pass: the patterns are grouped by their first byte (the forms of one
// value almost always share it), each group is searched for its common
// prefix with bytes.Index, and a group's next candidate is remembered
// until the search passes it, so no byte of the window is searched twice
// for the same group, however dense the matches. A candidate is checked
// against its group's patterns, longest first.
type patIndex struct {
	groups []patGroup
}

type patGroup struct {
	anchor []byte // the common prefix of the group's patterns
	pats   []int  // indexes of the patterns, longest first
	at, k  int    // the next match at or after from (k < 0: none)
	from   int    // where the search for at started; -1: not searched
}

func newPatIndex(pats []secretPattern) patIndex {
	var ix patIndex
	for k, p := range pats {
		if len(p.find) == 0 {
			continue
		}
		g := slices.IndexFunc(ix.groups, func(g patGroup) bool { return g.anchor[0] == p.find[0] })
		if g < 0 {
			ix.groups = append(ix.groups, patGroup{anchor: p.find})
			g = len(ix.groups) - 1
		}
		gr := &ix.groups[g]
		gr.anchor = gr.anchor[:commonPrefix(gr.anchor, p.find)]
		gr.pats = append(gr.pats, k)
	}
	for g := range ix.groups {
		slices.SortStableFunc(ix.groups[g].pats, func(a, b int) int { return len(pats[b].find) - len(pats[a].find) })
	}
	return ix
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// reset starts a new window.
func (ix *patIndex) reset() {
	for g := range ix.groups {
		ix.groups[g].from = -1
	}
}

// next returns the offset and index of the earliest (then longest)
// pattern in w at or after from, or k < 0. Calls within one window
// (between resets) must not go back: from never decreases.
func (ix *patIndex) next(pats []secretPattern, w []byte, from int) (at, k int) {
	at, k = -1, -1
	for g := range ix.groups {
		gr := &ix.groups[g]
		if gr.from < 0 || gr.k >= 0 && gr.at < from {
			gr.at, gr.k = gr.search(pats, w, from)
			gr.from = from
		}
		if gr.k >= 0 && (k < 0 || gr.at < at) {
			at, k = gr.at, gr.k
		}
	}
	return at, k
}

// search finds the group's first match in w at or after from.
func (gr *patGroup) search(pats []secretPattern, w []byte, from int) (int, int) {
	for from <= len(w) {
		j := bytes.Index(w[from:], gr.anchor)
		if j < 0 {
			return -1, -1
		}
		at := from + j
		for _, k := range gr.pats {
			if bytes.HasPrefix(w[at:], pats[k].find) {
				return at, k
			}
		}
		from = at + 1
	}
	return -1, -1
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
