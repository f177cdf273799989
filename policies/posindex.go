package policies

import (
	"strconv"
	"strings"
)

// posIndex maps key paths ("categories.git.hosts") to where they are in the
// source, and array paths to the positions of their elements. BurntSushi/toml
// keeps key positions private, so a small scanner finds them. It runs only
// on text the TOML parser accepted, but is written to never panic or loop
// on any input.
type posIndex struct {
	keys  map[string]Position
	elems map[string][]Position
}

// lookup returns the position of a path such as "categories.git.hosts[2]",
// falling back to the closest enclosing key, then to line 1.
func (ix *posIndex) lookup(file, path string) Position {
	for path != "" {
		if strings.HasSuffix(path, "]") {
			if open := strings.LastIndexByte(path, '['); open > 0 {
				base := path[:open]
				if n, err := strconv.Atoi(path[open+1 : len(path)-1]); err == nil {
					if el := ix.elems[base]; n >= 0 && n < len(el) {
						p := el[n]
						p.File = file
						return p
					}
				}
				if p, ok := ix.keys[path]; ok {
					p.File = file
					return p
				}
				path = base
				continue
			}
		}
		if p, ok := ix.keys[path]; ok {
			p.File = file
			return p
		}
		path = parentPath(path)
	}
	return Position{File: file, Line: 1, Col: 1}
}

// parentPath drops the last element of a key path.
func parentPath(path string) string {
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

// quoteKey writes a key the way paths show it: bare when it can be.
func quoteKey(k string) string {
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

func joinPath(prefix, key string) string {
	if prefix == "" {
		return quoteKey(key)
	}
	return prefix + "." + quoteKey(key)
}

func elemPath(prefix string, i int) string { return prefix + "[" + strconv.Itoa(i) + "]" }

type scanner struct {
	src       string
	i         int
	line, col int
	ix        *posIndex
	aot       map[string]int // array-of-tables path -> number of elements
	depth     int
}

func indexPositions(src string) *posIndex {
	s := &scanner{src: src, line: 1, col: 1, aot: map[string]int{},
		ix: &posIndex{keys: map[string]Position{}, elems: map[string][]Position{}}}
	s.document()
	return s.ix
}

func (s *scanner) pos() Position { return Position{Line: s.line, Col: s.col} }

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
		path = joinPath(path, k)
		if aot && i == len(parts)-1 {
			n := s.aot[path]
			s.aot[path] = n + 1
			if n == 0 {
				s.ix.keys[path] = p
			}
			path = elemPath(path, n)
			break
		}
		if n, ok := s.aot[path]; ok && n > 0 {
			path = elemPath(path, n-1)
		}
	}
	if _, ok := s.ix.keys[path]; !ok {
		s.ix.keys[path] = p
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
		path = joinPath(path, k)
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
	var elems []Position
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
			s.value(elemPath(path, len(elems)))
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
