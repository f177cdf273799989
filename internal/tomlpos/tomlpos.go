// Package tomlpos is what the two strict TOML readers, the policy loader
// and the appliance config (serve), share about keys: where each key and
// array element is written, so that errors found after decoding (unknown
// keys, bad values, cross-field checks) carry a file:line:col; the keys a
// struct's toml tags name (Fields); and the closest known key to a
// misspelt one (Closest). BurntSushi/toml keeps key positions private;
// a small scanner finds them.
//
// Paths are written the way errors show them: keys joined with ".", a key
// quoted when it is not bare (categories."my.cat"), and array elements as
// base[i] (categories.git.hosts[2], tests[1].expect). The scanner runs on
// text the TOML parser accepted, but never panics or loops on any input.
package tomlpos

import (
	"strconv"
	"strings"
)

// Pos is a 1-based line and byte column.
type Pos struct{ Line, Col int }

// Index maps key paths to where they are in the source, and array paths
// to the positions of their elements.
type Index struct {
	keys   map[string]Pos
	elems  map[string][]Pos
	tables map[string]bool // paths written as [table] or [[array]] headers
	aot    map[string]int  // array-of-tables path -> number of elements
}

// Scan indexes src.
func Scan(src string) *Index {
	ix := &Index{keys: map[string]Pos{}, elems: map[string][]Pos{}, tables: map[string]bool{}, aot: map[string]int{}}
	s := &scanner{src: src, line: 1, col: 1, ix: ix}
	s.document()
	return ix
}

// Lookup returns the position of a path such as "categories.git.hosts[2]",
// falling back to the closest enclosing key, then to line 1, column 1.
func (ix *Index) Lookup(path string) Pos {
	for path != "" {
		if strings.HasSuffix(path, "]") {
			if open := strings.LastIndexByte(path, '['); open > 0 {
				base := path[:open]
				if n, err := strconv.Atoi(path[open+1 : len(path)-1]); err == nil {
					if el := ix.elems[base]; n >= 0 && n < len(el) {
						return el[n]
					}
				}
				if p, ok := ix.keys[path]; ok {
					return p
				}
				path = base
				continue
			}
		}
		if p, ok := ix.keys[path]; ok {
			return p
		}
		path = Parent(path)
	}
	return Pos{Line: 1, Col: 1}
}

// Has reports whether path is a key or an array element written in the
// source.
func (ix *Index) Has(path string) bool {
	if _, ok := ix.keys[path]; ok {
		return true
	}
	if open := strings.LastIndexByte(path, '['); open > 0 && strings.HasSuffix(path, "]") {
		n, err := strconv.Atoi(path[open+1 : len(path)-1])
		return err == nil && n >= 0 && n < len(ix.elems[path[:open]])
	}
	return false
}

// Find returns where the key made of parts (as a decoder names it, without
// array indices) is written: its assignment or table header, or the
// assignment of an enclosing key whose value holds it. An array of tables
// stands for its first element. ok is false when it is not in the source
// (a missing required key).
func (ix *Index) Find(parts ...string) (p Pos, ok bool) {
	paths := make([]string, 0, len(parts))
	path := ""
	for _, k := range parts {
		path = Join(path, k)
		if ix.aot[path] > 0 {
			path = Elem(path, 0)
		}
		paths = append(paths, path)
	}
	if len(paths) == 0 {
		return Pos{}, false
	}
	if p, ok := ix.keys[paths[len(paths)-1]]; ok {
		return p, true
	}
	for i := len(paths) - 2; i >= 0; i-- {
		if p, ok := ix.keys[paths[i]]; ok && !ix.tables[paths[i]] {
			return p, true
		}
	}
	return Pos{}, false
}

// KeyAt returns the path of the last key that starts at or before a
// position: the key whose value (or comment) holds it, or "" before any.
func (ix *Index) KeyAt(line, col int) string {
	best, bestPos := "", Pos{}
	for k, p := range ix.keys {
		if k == `""` || p.Line > line || p.Line == line && p.Col > col { // `""`: what the scanner makes of stray bytes
			continue
		}
		if p.Line > bestPos.Line || p.Line == bestPos.Line && p.Col > bestPos.Col ||
			p == bestPos && (len(k) > len(best) || len(k) == len(best) && k > best) {
			best, bestPos = k, p
		}
	}
	return best
}

// Keys calls yield with every key path written in the source (table
// headers included), in no particular order.
func (ix *Index) Keys(yield func(path string) bool) {
	for k := range ix.keys {
		if !yield(k) {
			return
		}
	}
}

// Arrays calls yield with every array path and its number of elements,
// in no particular order.
func (ix *Index) Arrays(yield func(path string, n int) bool) {
	for k, el := range ix.elems {
		if !yield(k, len(el)) {
			return
		}
	}
}

// Parent drops the last element of a key path.
func Parent(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
	}
	inQuote := false
	last := -1
	for i := 0; i < len(path); i++ {
		switch path[i] {
		case '"':
			inQuote = !inQuote
		case '\\':
			if inQuote {
				i++
			}
		case '.':
			if !inQuote {
				last = i
			}
		}
	}
	if last < 0 {
		return ""
	}
	return path[:last]
}

// Quote writes a key the way paths show it: bare when it can be.
func Quote(k string) string {
	if k == "" {
		return `""`
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return strconv.Quote(k)
		}
	}
	return k
}

// Join appends key to a path.
func Join(prefix, key string) string {
	if prefix == "" {
		return Quote(key)
	}
	return prefix + "." + Quote(key)
}

// Elem is the path of element i of the array at prefix.
func Elem(prefix string, i int) string { return prefix + "[" + strconv.Itoa(i) + "]" }

type scanner struct {
	src       string
	i         int
	line, col int
	ix        *Index
	depth     int
}

func (s *scanner) pos() Pos { return Pos{Line: s.line, Col: s.col} }

func (s *scanner) eof() bool { return s.i >= len(s.src) }

func (s *scanner) peek() byte {
	if s.eof() {
		return 0
	}
	return s.src[s.i]
}

func (s *scanner) adv() {
	if s.eof() {
		return
	}
	if s.src[s.i] == '\n' {
		s.line++
		s.col = 1
	} else {
		s.col++
	}
	s.i++
}

func (s *scanner) skipSpace() {
	for c := s.peek(); c == ' ' || c == '\t' || c == '\r'; c = s.peek() {
		s.adv()
	}
}

// skipBlank skips spaces, newlines and comments.
func (s *scanner) skipBlank() {
	for !s.eof() {
		switch s.peek() {
		case ' ', '\t', '\r', '\n':
			s.adv()
		case '#':
			s.skipLine()
		default:
			return
		}
	}
}

func (s *scanner) skipLine() {
	for !s.eof() && s.peek() != '\n' {
		s.adv()
	}
}

func (s *scanner) document() {
	table := ""
	for !s.eof() {
		start := s.i
		s.skipBlank()
		if s.eof() {
			return
		}
		if s.peek() == '[' {
			table = s.header()
		} else {
			s.keyValue(table)
		}
		if s.i == start { // no progress on malformed input
			s.adv()
		}
	}
}

// header reads [a.b] or [[a.b]] and returns the resolved table path.
func (s *scanner) header() string {
	p := s.pos()
	s.adv()
	aot := s.peek() == '['
	if aot {
		s.adv()
	}
	parts := s.key()
	s.skipLine()
	path := ""
	for i, k := range parts {
		path = Join(path, k)
		if aot && i == len(parts)-1 {
			n := s.ix.aot[path]
			s.ix.aot[path] = n + 1
			if n == 0 {
				s.ix.keys[path] = p
				s.ix.tables[path] = true
			}
			path = Elem(path, n)
			break
		}
		if n, ok := s.ix.aot[path]; ok && n > 0 {
			path = Elem(path, n-1)
		}
	}
	if _, ok := s.ix.keys[path]; !ok {
		s.ix.keys[path] = p
		s.ix.tables[path] = true
	}
	return path
}

// key reads a dotted key.
func (s *scanner) key() []string {
	var parts []string
	for !s.eof() {
		s.skipSpace()
		var k string
		switch s.peek() {
		case '"':
			k = unquoteBasic(s.stringToken())
		case '\'':
			raw := s.stringToken()
			k = strings.Trim(raw, "'")
		default:
			st := s.i
			for c := s.peek(); c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'; c = s.peek() {
				s.adv()
			}
			k = s.src[st:s.i]
		}
		parts = append(parts, k)
		s.skipSpace()
		if s.peek() != '.' {
			break
		}
		s.adv()
	}
	return parts
}

func (s *scanner) keyValue(table string) {
	p := s.pos()
	parts := s.key()
	path := table
	for _, k := range parts {
		path = Join(path, k)
	}
	s.ix.keys[path] = p
	s.skipSpace()
	if s.peek() == '=' {
		s.adv()
	}
	s.skipSpace()
	s.value(path)
}

// value skips one value, indexing arrays and inline tables inside it.
func (s *scanner) value(path string) {
	s.depth++
	defer func() { s.depth-- }()
	if s.depth > 100 {
		s.skipLine()
		return
	}
	switch s.peek() {
	case '"', '\'':
		s.stringToken()
	case '[':
		s.array(path)
	case '{':
		s.inlineTable(path)
	default:
		for !s.eof() {
			c := s.peek()
			if c == ',' || c == ']' || c == '}' || c == '\n' || c == '#' {
				break
			}
			s.adv()
		}
	}
}

func (s *scanner) array(path string) {
	s.adv() // [
	var elems []Pos
	for !s.eof() {
		s.skipBlank()
		switch s.peek() {
		case ']':
			s.adv()
			s.ix.elems[path] = elems
			return
		case ',':
			s.adv()
			continue
		}
		start := s.i
		p := s.pos()
		if c := s.peek(); c == '[' || c == '{' { // only nested values need a path
			s.value(Elem(path, len(elems)))
		} else {
			s.value("")
		}
		elems = append(elems, p)
		if s.i == start {
			s.adv()
		}
	}
	s.ix.elems[path] = elems
}

func (s *scanner) inlineTable(path string) {
	s.adv() // {
	for !s.eof() {
		s.skipBlank()
		switch s.peek() {
		case '}':
			s.adv()
			return
		case ',':
			s.adv()
			continue
		}
		start := s.i
		s.keyValue(path)
		if s.i == start {
			s.adv()
		}
	}
}

// stringToken consumes a basic, literal or multi-line string and returns its
// raw text including quotes.
func (s *scanner) stringToken() string {
	st := s.i
	q := s.peek()
	triple := strings.HasPrefix(s.src[s.i:], strings.Repeat(string(q), 3))
	if triple {
		s.adv()
		s.adv()
		s.adv()
		for !s.eof() {
			if q == '"' && s.peek() == '\\' {
				s.adv()
				s.adv()
				continue
			}
			if strings.HasPrefix(s.src[s.i:], strings.Repeat(string(q), 3)) {
				s.adv()
				s.adv()
				s.adv()
				for s.peek() == q { // up to two quotes may end the content
					s.adv()
				}
				break
			}
			s.adv()
		}
		return s.src[st:s.i]
	}
	s.adv()
	for !s.eof() {
		c := s.peek()
		if c == '\n' {
			break
		}
		if q == '"' && c == '\\' {
			s.adv()
			s.adv()
			continue
		}
		s.adv()
		if c == q {
			break
		}
	}
	return s.src[st:s.i]
}

func unquoteBasic(raw string) string {
	if u, err := strconv.Unquote(raw); err == nil {
		return u
	}
	return strings.Trim(raw, `"`)
}
