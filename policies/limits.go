package policies

import (
	"airlock/internal/safefile"
	"airlock/internal/tomlpos"
)

// Caps on what one policy file may hold (docs/policy.md, "Limits"). They
// bound the memory and time a load takes, whatever the file says; a file
// above one is refused with an error at the place it is crossed.
const (
	// MaxPolicySize is the largest policy file read or parsed.
	MaxPolicySize = 4 << 20
	// MaxCategories is the most [categories.NAME] tables in one file.
	MaxCategories = 1024
	// MaxEntries is the most hosts and cidrs entries in one file, the
	// categories' and [deny]'s together.
	MaxEntries = 65536
	// MaxString is the longest string value or key, in bytes.
	MaxString = 4096
)

var maxPolicySizeText = safefile.Size(MaxPolicySize)

// limits reports every cap the decoded tree crosses, before any of it is
// compiled. It reports each kind of crossing once, at its first place.
func (l *loader) limits(tree map[string]any) {
	if cats, ok := tree["categories"].(map[string]any); ok && len(cats) > MaxCategories {
		l.errf("categories", "%d categories: a policy holds at most %d", len(cats), MaxCategories)
	}
	entries := 0
	countIn := func(m map[string]any) {
		for _, k := range []string{"hosts", "cidrs"} {
			if xs, ok := m[k].([]any); ok {
				entries += len(xs)
			}
		}
	}
	if d, ok := tree["deny"].(map[string]any); ok {
		countIn(d)
	}
	if cats, ok := tree["categories"].(map[string]any); ok {
		for _, c := range cats {
			if cm, ok := c.(map[string]any); ok {
				countIn(cm)
			}
		}
	}
	if entries > MaxEntries {
		l.errf("categories", "%d hosts and cidrs entries: a policy holds at most %d", entries, MaxEntries)
	}
	if path, n := longString("", tree); path != "" {
		l.errf(path, "a string or key of %d bytes: at most %d", n, MaxString)
	}
}

// longString returns the path and length of a string value or key longer
// than MaxString (the first one found), or "" when there is none.
func longString(path string, v any) (string, int) {
	switch v := v.(type) {
	case string:
		if len(v) > MaxString {
			return path, len(v)
		}
	case map[string]any:
		for k, x := range v {
			p := tomlpos.Join(path, k)
			if len(k) > MaxString {
				return path, len(k)
			}
			if q, n := longString(p, x); q != "" {
				return q, n
			}
		}
	case []any:
		for i, x := range v {
			if q, n := longString(tomlpos.Elem(path, i), x); q != "" {
				return q, n
			}
		}
	case []map[string]any:
		for i, x := range v {
			if q, n := longString(tomlpos.Elem(path, i), x); q != "" {
				return q, n
			}
		}
	}
	return "", 0
}
