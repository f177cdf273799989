package policies

import (
	"sort"
	"strings"
)

// Error is one problem in a policy file: where it is, the key path it
// concerns (such as "categories.git.hosts[2]") and what is wrong.
type Error struct {
	Pos  Position
	Path string
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Pos.String())
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrorList is every problem found in a policy, in file order. Load and
// Parse return all of them at once, never just the first.
type ErrorList []*Error

// Error prints one "file:line:col: path: message" per line.
func (l ErrorList) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// sortErrors orders errors by file position; equal positions keep their order.
func (l ErrorList) sort() {
	sort.SliceStable(l, func(i, j int) bool {
		a, b := l[i].Pos, l[j].Pos
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
}
