package pkgmeta

import (
	"encoding/json"
	"errors"
)

// A minimal scanner over JSON already checked with json.Valid: it finds
// the members of an object by byte offsets, so a rewrite can drop some
// of them and copy the rest as they are, without decoding and encoding
// the whole document again.

var errScan = errors.New("json: unexpected structure")

// member is one "key": value of an object, by offsets into the document.
type member struct {
	key             string // unquoted
	start, valStart int    // the key's opening quote; the value's first byte
	end             int    // just past the value
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset just past the string starting at b[i].
func skipString(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, errScan
}

// skipValue returns the offset just past the value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errScan
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := skipString(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errScan
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	return j, nil
}

// members lists the members of the object starting at b[i].
func members(b []byte, i int) ([]member, int, error) {
	if i >= len(b) || b[i] != '{' {
		return nil, 0, errScan
	}
	var out []member
	j := skipSpace(b, i+1)
	if j < len(b) && b[j] == '}' {
		return out, j + 1, nil
	}
	for j < len(b) {
		if b[j] != '"' {
			return nil, 0, errScan
		}
		kend, err := skipString(b, j)
		if err != nil {
			return nil, 0, err
		}
		var key string
		if err := json.Unmarshal(b[j:kend], &key); err != nil {
			return nil, 0, err
		}
		v := skipSpace(b, kend)
		if v >= len(b) || b[v] != ':' {
			return nil, 0, errScan
		}
		v = skipSpace(b, v+1)
		end, err := skipValue(b, v)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, member{key: key, start: j, valStart: v, end: end})
		j = skipSpace(b, end)
		if j < len(b) && b[j] == ',' {
			j = skipSpace(b, j+1)
			continue
		}
		if j < len(b) && b[j] == '}' {
			return out, j + 1, nil
		}
		return nil, 0, errScan
	}
	return nil, 0, errScan
}

// dropMembers rewrites the object at b[i:end] without the members whose
// key drop names.
func dropMembers(b []byte, ms []member, drop func(string) bool) []byte {
	out := make([]byte, 0, 2+ms[len(ms)-1].end-ms[0].start)
	out = append(out, '{')
	first := true
	for _, m := range ms {
		if drop(m.key) {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, b[m.start:m.end]...)
	}
	return append(out, '}')
}
