package policies

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"airlock/internal/tomlpos"
)

// loader walks the decoded TOML tree, collecting every error with its
// position and key path.
type loader struct {
	file string
	ix   *tomlpos.Index
	errs ErrorList
	// lockSums are the names and digests of the lockfiles read: part of
	// the policy's hash, so a reload sees a changed lockfile.
	lockSums []byte
}

func (l *loader) pos(path string) Position { return at(l.ix, l.file, path) }

func (l *loader) rule(path string) Rule { return Rule{Name: path, Pos: l.pos(path)} }

func (l *loader) errf(path, format string, args ...any) {
	l.errs = append(l.errs, &Error{Pos: l.pos(path), Path: path, Msg: fmt.Sprintf(format, args...)})
}

// known reports every key of m that is not in keys as an error.
func (l *loader) known(m map[string]any, path string, keys ...string) {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !contains(keys, k) {
			msg := "unknown key"
			if s := closest(k, keys); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			l.errf(joinPath(path, k), "%s", msg)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// closest returns the key within edit distance 2 of k, if any.
func closest(k string, keys []string) string {
	best, bestD := "", 3
	for _, c := range keys {
		if d := editDistance(k, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
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

func (l *loader) str(m map[string]any, key, path string) (string, bool) {
	v, ok := m[key]
	if !ok {
		return "", false
	}
	s, isStr := v.(string)
	if !isStr {
		l.errf(joinPath(path, key), "want a string, got %s", tomlType(v))
		return "", false
	}
	return s, true
}

func (l *loader) boolean(m map[string]any, key, path string, def bool) bool {
	v, ok := m[key]
	if !ok {
		return def
	}
	b, isBool := v.(bool)
	if !isBool {
		l.errf(joinPath(path, key), "want true or false, got %s", tomlType(v))
		return def
	}
	return b
}

func (l *loader) integer(m map[string]any, key, path string, lo, hi int64) (int64, bool) {
	v, ok := m[key]
	if !ok {
		return 0, false
	}
	n, isInt := v.(int64)
	if !isInt {
		l.errf(joinPath(path, key), "want an integer, got %s", tomlType(v))
		return 0, false
	}
	if n < lo || n > hi {
		l.errf(joinPath(path, key), "%d is out of range [%d, %d]", n, lo, hi)
		return 0, false
	}
	return n, true
}

func (l *loader) table(m map[string]any, key, path string) (map[string]any, bool) {
	v, ok := m[key]
	if !ok {
		return nil, false
	}
	t, isTable := v.(map[string]any)
	if !isTable {
		l.errf(joinPath(path, key), "want a table, got %s", tomlType(v))
		return nil, false
	}
	return t, true
}

// list returns the elements of an array value.
func (l *loader) list(m map[string]any, key, path string) ([]any, bool) {
	v, ok := m[key]
	if !ok {
		return nil, false
	}
	switch a := v.(type) {
	case []any:
		return a, true
	case []map[string]any:
		out := make([]any, len(a))
		for i := range a {
			out[i] = a[i]
		}
		return out, true
	}
	l.errf(joinPath(path, key), "want an array, got %s", tomlType(v))
	return nil, false
}

// strList returns the string elements of an array with their paths.
func (l *loader) strList(m map[string]any, key, path string) (vals, paths []string, present bool) {
	items, ok := l.list(m, key, path)
	if !ok {
		return nil, nil, m[key] != nil
	}
	all := elemPaths(joinPath(path, key), len(items))
	for i, it := range items {
		p := all[i]
		s, isStr := it.(string)
		if !isStr {
			l.errf(p, "want a string, got %s", tomlType(it))
			continue
		}
		vals = append(vals, s)
		paths = append(paths, p)
	}
	return vals, paths, true
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

// Closest returns the name in names within edit distance 2 of k, or ""
// (for "did you mean" hints in other strict configs).
func Closest(k string, names []string) string { return closest(k, names) }
