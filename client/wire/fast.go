package wire

import (
	"encoding/base64"
	"slices"
	"strconv"
	"unicode/utf8"

	"airlock/internal/jsonstr"
)

// The exec request and its stream's frames are written and read here
// without reflection. A process that runs one command (the CLI front)
// would otherwise spend ~150 µs, cold, building encoding/json's codecs
// for three types: 5 % of its whole round trip. The bytes are the same
// (AppendExecRequest writes what json.Marshal writes), and a frame this
// reader does not recognize whole goes to encoding/json (parseFrame), so
// nothing is read differently; TestFastCodecMatchesJSON and
// FuzzFastFrame check both.

// AppendExecRequest appends req's JSON, byte for byte what json.Marshal
// writes for it.
func AppendExecRequest(b []byte, req *ExecRequest) []byte {
	b = append(b, '{')
	n := len(b)
	field := func(name string) {
		if len(b) > n {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
	}
	if len(req.Argv) > 0 {
		field("argv")
		b = append(b, '[')
		for i, a := range req.Argv {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonstr.Append(b, a)
		}
		b = append(b, ']')
	}
	for _, f := range []struct{ name, v string }{{"shell", req.Shell}, {"cwd", req.Cwd}, {"user", req.User}} {
		if f.v != "" {
			field(f.name)
			b = jsonstr.Append(b, f.v)
		}
	}
	if len(req.Env) > 0 {
		field("env")
		b = append(b, '{')
		keys := make([]string, 0, len(req.Env))
		for k := range req.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonstr.Append(b, k)
			b = append(b, ':')
			b = jsonstr.Append(b, req.Env[k])
		}
		b = append(b, '}')
	}
	if len(req.Stdin) > 0 {
		field("stdin")
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, req.Stdin)
		b = append(b, '"')
	}
	if req.Timeout != 0 {
		field("timeout")
		t, _ := req.Timeout.MarshalText()
		b = jsonstr.Append(b, string(t))
	}
	for _, f := range []struct {
		name string
		v    bool
	}{{"background", req.Background}, {"tty", req.TTY}} {
		if f.v {
			field(f.name)
			b = append(b, "true"...)
		}
	}
	for _, f := range []struct {
		name string
		v    uint16
	}{{"rows", req.Rows}, {"cols", req.Cols}} {
		if f.v != 0 {
			field(f.name)
			b = strconv.AppendUint(b, uint64(f.v), 10)
		}
	}
	return append(b, '}')
}

// parseFrameFast reads the two frames of almost every stream, an output
// frame and a plain exit frame, as the appliance's encoder writes them.
// It returns false for anything else (escapes, other keys, an error
// frame), which encoding/json then reads.
func parseFrameFast(line []byte, f *ExecFrame) bool {
	if p, ok := cutPrefix(line, `{"stream":"`); ok {
		var name string
		switch {
		case hasPrefix(p, `stdout","data":"`):
			name = "stdout"
		case hasPrefix(p, `stderr","data":"`):
			name = "stderr"
		default:
			return false
		}
		p = p[len(`stdout","data":"`):]
		if len(p) < 2 || string(p[len(p)-2:]) != `"}` {
			return false
		}
		enc := p[:len(p)-2]
		for _, c := range enc {
			if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
				return false
			}
		}
		data := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
		n, err := base64.StdEncoding.Decode(data, enc)
		if err != nil || n == 0 {
			return false
		}
		*f = ExecFrame{Stream: name, Data: data[:n]}
		return true
	}
	p, ok := cutPrefix(line, `{"exit":{`)
	if !ok || len(p) < 2 || string(p[len(p)-2:]) != "}}" {
		return false
	}
	p = p[:len(p)-2]
	var r ExecResult
	for len(p) > 0 {
		if p[0] != '"' {
			return false
		}
		end := indexByte(p[1:], '"')
		if end < 0 {
			return false
		}
		key := string(p[1 : 1+end])
		p = p[2+end:]
		if len(p) == 0 || p[0] != ':' {
			return false
		}
		p = p[1:]
		i := 0
		for i < len(p) && p[i] != ',' {
			if p[i] == '"' { // a string value: to its closing quote
				j := indexByte(p[i+1:], '"')
				if j < 0 {
					return false
				}
				i += j + 2
				continue
			}
			i++
		}
		if !setResultField(&r, key, p[:i]) {
			return false
		}
		p = p[i:]
		if len(p) > 0 {
			p = p[1:] // the comma
			if len(p) == 0 {
				return false
			}
		}
	}
	*f = ExecFrame{Exit: &r}
	return true
}

// setResultField sets one field from its raw JSON value; false for a key
// or a value this reader leaves to encoding/json.
func setResultField(r *ExecResult, key string, v []byte) bool {
	str := func(dst *string) bool {
		if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
			return false
		}
		s := v[1 : len(v)-1]
		for _, c := range s {
			if c < 0x20 || c == '\\' || c == '"' || c >= utf8.RuneSelf {
				return false
			}
		}
		*dst = string(s)
		return true
	}
	num := func(dst *int64) bool {
		s := v
		if len(s) > 0 && s[0] == '-' {
			s = s[1:]
		}
		if len(s) == 0 || len(s) > 1 && s[0] == '0' {
			return false
		}
		for _, c := range s {
			if c < '0' || c > '9' {
				return false
			}
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		*dst = n
		return err == nil
	}
	boolean := func(dst *bool) bool {
		switch string(v) {
		case "true":
			*dst = true
		case "false":
			*dst = false
		default:
			return false
		}
		return true
	}
	integer := func(dst *int) bool {
		var n int64
		if !num(&n) || int64(int(n)) != n {
			return false
		}
		*dst = int(n)
		return true
	}
	switch key {
	case "id":
		return str(&r.ID)
	case "exit_code":
		return integer(&r.ExitCode)
	case "duration_ms":
		return num(&r.DurationMS)
	case "timed_out":
		return boolean(&r.TimedOut)
	case "killed":
		return boolean(&r.Killed)
	case "limit":
		return str(&r.Limit)
	case "truncated":
		return boolean(&r.Truncated)
	case "agent":
		return str(&r.Agent)
	case "pid":
		return integer(&r.Pid)
	case "signal":
		return str(&r.Signal)
	case "running":
		return boolean(&r.Running)
	case "utime_us":
		return num(&r.UtimeUS)
	case "stime_us":
		return num(&r.StimeUS)
	case "maxrss_kb":
		return num(&r.MaxRSSKB)
	case "stdout_bytes":
		return num(&r.StdoutBytes)
	case "stderr_bytes":
		return num(&r.StderrBytes)
	}
	return false
}

func cutPrefix(b []byte, p string) ([]byte, bool) {
	if !hasPrefix(b, p) {
		return b, false
	}
	return b[len(p):], true
}

func hasPrefix(b []byte, p string) bool { return len(b) >= len(p) && string(b[:len(p)]) == p }

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}
