package serve

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"airlock/internal/tomlpos"
)

// ConfigError is one problem in a config file, at file:line:col.
type ConfigError struct {
	File string
	Line int // 0 when the key is not in the file (a missing required key)
	Col  int
	Key  string
	Msg  string
}

func (e ConfigError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
}

// Errors is every problem found in one config file.
type Errors []ConfigError

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// decodeError turns a TOML decode error into a positioned ConfigError.
func decodeError(name string, src []byte, err error) ConfigError {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		msg := pe.Message
		if pe.LastKey != "" {
			msg = pe.LastKey + ": " + msg
		}
		line, col := pe.Position.Line, pe.Position.Col
		if line == 0 && pe.LastKey != "" {
			line, col = newLocator(name, src).find(splitKey(pe.LastKey))
		}
		return ConfigError{File: name, Line: line, Col: col, Key: pe.LastKey, Msg: msg}
	}
	// Type mismatches come back as plain errors: "toml: line N (last key "k"): msg".
	if m := typeErr.FindStringSubmatch(err.Error()); m != nil {
		line, col := newLocator(name, src).find(splitKey(m[2]))
		if line == 0 {
			line, _ = strconv.Atoi(m[1])
		}
		return ConfigError{File: name, Line: line, Col: col, Key: m[2], Msg: m[2] + ": " + m[3]}
	}
	return ConfigError{File: name, Msg: err.Error()}
}

var typeErr = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)

// locator finds where a key is written in a TOML source, so errors found
// after decoding (unknown keys, cross-field checks) carry a position. It
// is the policy loader's locator too (internal/tomlpos).
type locator struct {
	file string
	ix   *tomlpos.Index
}

func newLocator(file string, src []byte) locator {
	return locator{file: file, ix: tomlpos.Scan(string(src))}
}

func (l locator) errorf(key toml.Key, format string, args ...any) ConfigError {
	line, col := l.find(key)
	return ConfigError{File: l.file, Line: line, Col: col, Key: key.String(), Msg: fmt.Sprintf(format, args...)}
}

// find returns the line and column of key's assignment or table header
// (or of the assignment of an enclosing key whose value holds it), or
// 0, 0 if it is not written in the file.
func (l locator) find(key toml.Key) (int, int) {
	p, ok := l.ix.Find(key...)
	if !ok {
		return 0, 0
	}
	return p.Line, p.Col
}

func splitKey(s string) toml.Key { return toml.Key(strings.Split(s, ".")) }
