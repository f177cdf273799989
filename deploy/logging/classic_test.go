package logging

import (
	"fmt"
	"strings"
)

// section is one [NAME] section of a Fluent Bit classic config: its
// entries in order (a key may repeat, as Match or Path can).
type section struct {
	name    string
	line    int
	entries [][2]string
}

// get is the value of key (case-insensitive, as Fluent Bit reads keys),
// "" when absent.
func (s section) get(key string) string {
	for _, e := range s.entries {
		if strings.EqualFold(e[0], key) {
			return e[1]
		}
	}
	return ""
}

// parseClassic reads Fluent Bit's classic config format: comment lines
// start with #, a section header [NAME] is not indented, its entries
// "Key Value" are indented alike. Directives (@INCLUDE, @SET) are not
// used by the examples and are refused. Errors name the line.
func parseClassic(src string) ([]section, error) {
	var out []section
	indent := ""
	for n, raw := range strings.Split(src, "\n") {
		line := strings.TrimRight(raw, " \t\r")
		trimmed := strings.TrimLeft(line, " \t")
		switch {
		case trimmed == "" || strings.HasPrefix(trimmed, "#"):
			continue
		case strings.HasPrefix(trimmed, "@"):
			return nil, fmt.Errorf("line %d: directive %q is not supported here", n+1, strings.Fields(trimmed)[0])
		case strings.HasPrefix(line, "["):
			if !strings.HasSuffix(line, "]") || len(line) < 3 || strings.ContainsAny(line[1:len(line)-1], "[] \t") {
				return nil, fmt.Errorf("line %d: malformed section header %q", n+1, line)
			}
			out = append(out, section{name: strings.ToUpper(line[1 : len(line)-1]), line: n + 1})
			indent = ""
			continue
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("line %d: entry outside a section", n+1)
		}
		lead := line[:len(line)-len(trimmed)]
		if lead == "" {
			return nil, fmt.Errorf("line %d: an entry must be indented", n+1)
		}
		if indent == "" {
			indent = lead
		} else if lead != indent {
			return nil, fmt.Errorf("line %d: indentation differs from the section's first entry", n+1)
		}
		i := strings.IndexAny(trimmed, " \t")
		if i < 0 || strings.TrimSpace(trimmed[i:]) == "" {
			return nil, fmt.Errorf("line %d: entry %q has no value", n+1, trimmed)
		}
		s := &out[len(out)-1]
		s.entries = append(s.entries, [2]string{trimmed[:i], strings.TrimSpace(trimmed[i:])})
	}
	return out, nil
}
