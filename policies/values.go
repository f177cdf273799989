package policies

import (
	"fmt"
	"strconv"
	"strings"

	"airlock/internal/tomlpos"
)

// loader compiles the decoded wire structs (wire.go) into a Policy,
// collecting every error with its position and key path.
type loader struct {
	file string
	ix   *tomlpos.Index
	errs ErrorList
	// wire is the file as decoded, wireCats each category's table: the
	// lints read them.
	wire     wirePolicy
	wireCats map[*Category]*wireCategory
	// lockSums are the names and digests of the lockfiles read: part of
	// the policy's hash, so a reload sees a changed lockfile.
	lockSums []byte
}

// pos is the position of path in the file, or of its closest enclosing
// key written.
func (l *loader) pos(path string) Position {
	p := l.ix.Lookup(path)
	return Position{File: l.file, Line: p.Line, Col: p.Col}
}

func (l *loader) rule(path string) Rule { return Rule{Name: path, Pos: l.pos(path)} }

func (l *loader) errf(path, format string, args ...any) {
	l.errs = append(l.errs, &Error{Pos: l.pos(path), Path: path, Msg: fmt.Sprintf(format, args...)})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return "a date or time"
}

func oneOf(s string, opts ...string) bool { return contains(opts, s) }

func quoteList(opts []string) string {
	q := make([]string, len(opts))
	for i, o := range opts {
		q[i] = fmt.Sprintf("%q", o)
	}
	return strings.Join(q, ", ")
}

// elemPaths returns base[0] ... base[n-1], sharing one allocation (a
// policy may list 100,000 hosts).
func elemPaths(base string, n int) []string {
	b := make([]byte, 0, n*(len(base)+8))
	offs := make([]int, n+1)
	for i := 0; i < n; i++ {
		b = append(b, base...)
		b = append(b, '[')
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, ']')
		offs[i+1] = len(b)
	}
	all := string(b)
	out := make([]string, n)
	for i := range out {
		out[i] = all[offs[i]:offs[i+1]]
	}
	return out
}
