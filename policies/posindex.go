package policies

import "airlock/internal/tomlpos"

// Key paths ("categories.git.hosts[2]") are tomlpos paths; the loader
// positions its errors and rules with a tomlpos.Index of the source.

func joinPath(prefix, key string) string { return tomlpos.Join(prefix, key) }

func elemPath(prefix string, i int) string { return tomlpos.Elem(prefix, i) }

func parentPath(path string) string { return tomlpos.Parent(path) }

// at is the position of a path in file, or of its closest enclosing key.
func at(ix *tomlpos.Index, file, path string) Position {
	p := ix.Lookup(path)
	return Position{File: file, Line: p.Line, Col: p.Col}
}
