// Package logging holds the log shipper examples (Vector, Fluent Bit) for
// Airlock's audit stream; this test parses each example and holds its
// parser settings to records the real audit encoder writes, in both
// stream flavors.
package logging

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"airlock/audit"
)

// streamPath is where the packaged config writes the stream.
func streamPath(t *testing.T) string {
	t.Helper()
	var c struct {
		Audit struct{ JSONL string } `toml:"audit"`
	}
	if _, err := toml.DecodeFile("../../packaging/airlock.toml", &c); err != nil || c.Audit.JSONL == "" {
		t.Fatalf("packaging/airlock.toml: audit.jsonl %q, %v", c.Audit.JSONL, err)
	}
	return c.Audit.JSONL
}

// shipped is one stream line as a shipper's JSON parser sees it, and the
// time of the Airlock record it is.
type shipped struct {
	fields map[string]any
	at     time.Time
}

// records runs a realistic mix through the real pipeline in one flavor.
func records(t *testing.T, format audit.Format) []shipped {
	t.Helper()
	var buf bytes.Buffer
	p, err := audit.NewPipeline(audit.Config{StreamWriter: &buf, StreamFormat: format, Node: "node-a", ProductVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	e := audit.New(audit.KindDNS, "sb-1")
	e.Time, e.Verdict, e.Rule = now, "allow", "categories.git.hosts[0] (p.toml:3:1)"
	e.DNS = &audit.DNS{QName: "git.example.test.", QType: "A", RCode: "NOERROR", Answers: []string{"198.18.7.7"}}
	p.Emit(e)
	e = audit.New(audit.KindFlow, "sb-1")
	e.Time, e.ID, e.Verdict, e.Rule = now.Add(time.Millisecond), "f1", "deny", "default"
	e.Flow = &audit.Flow{Stage: "decision", Source: "198.18.0.2:4000", OrigDst: "198.18.9.9:443", SNI: "paste.example.test"}
	p.Emit(e)
	e = audit.New(audit.KindHTTP, "sb-1")
	e.Time, e.Verdict = now.Add(2*time.Millisecond), "allow"
	e.HTTP = &audit.HTTP{Method: "GET", Scheme: "https", Host: "docs.example.test", Path: "/x", Status: 200}
	p.Emit(e)
	e = audit.New(audit.KindLifecycle, "sb-1")
	e.Time = now.Add(3 * time.Millisecond)
	e.Lifecycle = &audit.Lifecycle{Stage: "started"}
	p.Emit(e)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	var out []shipped
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		d := json.NewDecoder(bytes.NewReader(l))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			t.Fatalf("%s: a JSON parser refuses the line: %v", format, err)
		}
		var ev audit.Event
		rec := l
		if u, ok := m["unmapped"].(map[string]any); ok {
			rec, _ = json.Marshal(u["airlock"])
		}
		if err := json.Unmarshal(rec, &ev); err != nil || ev.Kind == "" {
			t.Fatalf("%s: no Airlock record in %s: %v", format, l, err)
		}
		out = append(out, shipped{m, ev.Time})
	}
	if len(out) != 4 {
		t.Fatalf("%s: %d records", format, len(out))
	}
	return out
}

type vectorConfig struct {
	DataDir string `toml:"data_dir"`
	Sources map[string]struct {
		Type         string   `toml:"type"`
		Include      []string `toml:"include"`
		ReadFrom     string   `toml:"read_from"`
		MaxLineBytes int      `toml:"max_line_bytes"`
	} `toml:"sources"`
	Transforms map[string]struct {
		Type        string   `toml:"type"`
		Inputs      []string `toml:"inputs"`
		DropOnError bool     `toml:"drop_on_error"`
		Source      string   `toml:"source"`
	} `toml:"transforms"`
	Sinks map[string]struct {
		Type     string   `toml:"type"`
		Inputs   []string `toml:"inputs"`
		Encoding struct {
			Codec string `toml:"codec"`
		} `toml:"encoding"`
	} `toml:"sinks"`
}

var (
	vrlParse    = regexp.MustCompile(`(?m)^\. = parse_json!\(string!\(\.message\)\)$`)
	vrlIsInt    = regexp.MustCompile(`if is_integer\(\.(\w+)\) \{`)
	vrlFromUnix = regexp.MustCompile(`\.timestamp = from_unix_timestamp!\(\.(\w+), unit: "(\w+)"\)`)
	vrlParseTS  = regexp.MustCompile(`\.timestamp = parse_timestamp!\(\.(\w+), format: "([^"]+)"\)`)
)

// strftimeLayouts are the chrono formats the test knows, as Go layouts.
var strftimeLayouts = map[string]string{"%+": time.RFC3339Nano}

var unixUnits = map[string]time.Duration{"seconds": time.Second, "milliseconds": time.Millisecond, "nanoseconds": time.Nanosecond}

// The Vector example tails the packaged stream path, parses each line as
// JSON and takes the timestamp from each flavor's time as it really is.
func TestVectorExample(t *testing.T) {
	var c vectorConfig
	md, err := toml.DecodeFile("vector.toml", &c)
	if err != nil {
		t.Fatal(err)
	}
	if u := md.Undecoded(); len(u) > 0 {
		t.Fatalf("vector.toml: keys this test does not check: %v", u)
	}
	src, ok := c.Sources["airlock"]
	if !ok || src.Type != "file" || len(src.Include) != 1 || src.Include[0] != streamPath(t) {
		t.Fatalf("sources.airlock: %+v, want a file source of %s", src, streamPath(t))
	}
	if src.MaxLineBytes < audit.MaxLineBytes {
		t.Errorf("max_line_bytes %d < audit.MaxLineBytes %d: long records would be cut", src.MaxLineBytes, audit.MaxLineBytes)
	}
	tr, ok := c.Transforms["airlock_parse"]
	if !ok || tr.Type != "remap" || len(tr.Inputs) != 1 || tr.Inputs[0] != "airlock" {
		t.Fatalf("transforms.airlock_parse: %+v", tr)
	}
	for name, s := range c.Sinks {
		if len(s.Inputs) != 1 || s.Inputs[0] != "airlock_parse" {
			t.Errorf("sinks.%s takes %v, want the parsed records", name, s.Inputs)
		}
	}
	if !vrlParse.MatchString(tr.Source) {
		t.Fatalf("the remap does not parse .message as JSON:\n%s", tr.Source)
	}
	isInt, fromUnix, parseTS := vrlIsInt.FindStringSubmatch(tr.Source), vrlFromUnix.FindStringSubmatch(tr.Source), vrlParseTS.FindStringSubmatch(tr.Source)
	if isInt == nil || fromUnix == nil || parseTS == nil || fromUnix[1] != isInt[1] || parseTS[1] != isInt[1] {
		t.Fatalf("the remap's timestamp: %q %q %q", isInt, fromUnix, parseTS)
	}
	unit, layout := unixUnits[fromUnix[2]], strftimeLayouts[parseTS[2]]
	if unit == 0 || layout == "" {
		t.Fatalf("unit %q or format %q unknown to this test", fromUnix[2], parseTS[2])
	}
	for _, f := range []audit.Format{audit.FormatAirlock, audit.FormatOCSF} {
		for i, r := range records(t, f) {
			at, prec, err := vectorTime(r.fields[isInt[1]], unit, layout)
			if err != nil {
				t.Errorf("%s record %d: %v", f, i+1, err)
			} else if want := r.at.Truncate(prec); !at.Equal(want) {
				t.Errorf("%s record %d: timestamp %v, want %v", f, i+1, at, want)
			}
		}
	}
}

// vectorTime does what the remap does with the time field, and says to
// what precision.
func vectorTime(v any, unit time.Duration, layout string) (time.Time, time.Duration, error) {
	if n, ok := v.(json.Number); ok {
		i, err := n.Int64()
		if err != nil {
			return time.Time{}, 0, fmt.Errorf("time %v is a number but not an integer (is_integer is false)", n)
		}
		return time.Unix(0, i*int64(unit)), unit, nil
	}
	s, ok := v.(string)
	if !ok {
		return time.Time{}, 0, fmt.Errorf("time %v (%T) is neither an integer nor a string", v, v)
	}
	at, err := time.Parse(layout, s)
	return at, time.Nanosecond, err
}

// fluentExample is a Fluent Bit config and the flavor it is for.
var fluentExamples = map[string]audit.Format{"fluent-bit.conf": audit.FormatAirlock, "fluent-bit-ocsf.conf": audit.FormatOCSF}

func readClassic(t *testing.T, name string) []section {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := parseClassic(string(b))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s
}

func only(t *testing.T, file string, secs []section, name string) section {
	t.Helper()
	var out []section
	for _, s := range secs {
		if s.name == name {
			out = append(out, s)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%s: %d [%s] sections, want 1", file, len(out), name)
	}
	return out[0]
}

// The Fluent Bit examples tail the packaged stream path with a JSON
// parser whose time settings read each flavor's time as it really is.
func TestFluentBitExamples(t *testing.T) {
	parsers := map[string]section{}
	for _, s := range readClassic(t, "parsers.conf") {
		if s.name != "PARSER" {
			t.Fatalf("parsers.conf:%d: [%s] in a parsers file", s.line, s.name)
		}
		parsers[s.get("Name")] = s
	}
	for file, flavor := range fluentExamples {
		secs := readClassic(t, file)
		if pf := only(t, file, secs, "SERVICE").get("Parsers_File"); pf != "parsers.conf" {
			t.Fatalf("%s: Parsers_File %q", file, pf)
		}
		in := only(t, file, secs, "INPUT")
		if in.get("Name") != "tail" || in.get("Path") != streamPath(t) || in.get("DB") == "" {
			t.Fatalf("%s: input %+v, want tail of %s with a DB", file, in.entries, streamPath(t))
		}
		if n, err := fluentSize(in.get("Buffer_Max_Size")); err != nil || n < audit.MaxLineBytes {
			t.Errorf("%s: Buffer_Max_Size %q (%v): less than audit.MaxLineBytes %d", file, in.get("Buffer_Max_Size"), err, audit.MaxLineBytes)
		}
		p, ok := parsers[in.get("Parser")]
		if !ok || !strings.EqualFold(p.get("Format"), "json") {
			t.Fatalf("%s: parser %q is not a json parser in parsers.conf", file, in.get("Parser"))
		}
		out := only(t, file, secs, "OUTPUT")
		if ok, _ := path.Match(out.get("Match"), in.get("Tag")); !ok {
			t.Errorf("%s: output Match %q does not take the input's tag %q", file, out.get("Match"), in.get("Tag"))
		}
		at := fluentTimeFunc(t, file, secs, in, p)
		for i, r := range records(t, flavor) {
			got, err := at(r.fields)
			if err != nil {
				t.Errorf("%s record %d: %v", file, i+1, err)
			} else if want := r.at.Truncate(time.Millisecond); !got.Truncate(time.Millisecond).Equal(want) || flavor == audit.FormatAirlock && !got.Equal(r.at) {
				t.Errorf("%s record %d: timestamp %v, want %v", file, i+1, got, want)
			}
		}
	}
}

// fluentTimeFunc returns what the config does with a record's time: the
// parser's Time_Key and Time_Format, or, without them, the Lua filter.
func fluentTimeFunc(t *testing.T, file string, secs []section, in, p section) func(map[string]any) (time.Time, error) {
	if key := p.get("Time_Key"); key != "" {
		if !strings.EqualFold(p.get("Time_Keep"), "on") {
			t.Errorf("parser %s drops the record's time field (Time_Keep)", p.get("Name"))
		}
		format := p.get("Time_Format")
		return func(m map[string]any) (time.Time, error) {
			s, ok := m[key].(string)
			if !ok {
				return time.Time{}, fmt.Errorf("%s is %T, the json parser takes only a string time", key, m[key])
			}
			return fluentStrptime(format, s)
		}
	}
	f := only(t, file, secs, "FILTER")
	if f.get("Name") != "lua" {
		t.Fatalf("%s: parser %s has no Time_Key and the filter is not lua", file, p.get("Name"))
	}
	if ok, _ := path.Match(f.get("Match"), in.get("Tag")); !ok {
		t.Fatalf("%s: the lua filter's Match %q does not take %q", file, f.get("Match"), in.get("Tag"))
	}
	script, err := os.ReadFile(f.get("script"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)function ` + regexp.QuoteMeta(f.get("call")) +
		`\(tag, timestamp, record\).*local ms = record\["(\w+)"\].*return 1, ms / 1000, record`).FindSubmatch(script)
	if m == nil {
		t.Fatalf("%s: no function %s returning record[KEY] / 1000 as the timestamp", f.get("script"), f.get("call"))
	}
	return func(r map[string]any) (time.Time, error) {
		n, ok := r[string(m[1])].(json.Number)
		if !ok {
			return time.Time{}, fmt.Errorf("%s is %T, the script takes a number", m[1], r[string(m[1])])
		}
		ms, err := n.Int64()
		return time.UnixMilli(ms), err
	}
}

// fluentSize reads a Fluent Bit size: bytes, or with a k, m or g suffix.
func fluentSize(s string) (int, error) {
	mult := 1
	switch strings.ToLower(s[len(s)-1:]) {
	case "k":
		mult = 1 << 10
	case "m":
		mult = 1 << 20
	case "g":
		mult = 1 << 30
	}
	if mult > 1 {
		s = s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	return n * mult, err
}

// fluentStrptime parses s as Fluent Bit's strptime does for the
// directives the example uses (%Y %m %d %H %M %S, and %L for the
// fractional seconds); other bytes must match. What follows the format
// may only be Fluent Bit's ignored "Z" (UTC, which it assumes).
func fluentStrptime(format, s string) (time.Time, error) {
	var v [7]int
	rest := s
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			if rest == "" || rest[0] != format[i] {
				return time.Time{}, fmt.Errorf("time %q does not match %q at %q", s, format, rest)
			}
			rest = rest[1:]
			continue
		}
		i++
		idx := strings.IndexByte("YmdHMSL", format[i])
		if idx < 0 {
			return time.Time{}, fmt.Errorf("directive %%%c unknown to this test", format[i])
		}
		width := map[byte]int{'Y': 4, 'L': 9}[format[i]]
		if width == 0 {
			width = 2
		}
		j := 0
		for j < len(rest) && j < width && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if j == 0 || (format[i] != 'L' && j != width) {
			return time.Time{}, fmt.Errorf("time %q does not match %q at %q", s, format, rest)
		}
		v[idx], _ = strconv.Atoi(rest[:j])
		if format[i] == 'L' {
			v[idx] *= int(pow10(9 - j))
		}
		rest = rest[j:]
	}
	if rest != "" && rest != "Z" {
		return time.Time{}, fmt.Errorf("time %q: %q left after %q", s, rest, format)
	}
	return time.Date(v[0], time.Month(v[1]), v[2], v[3], v[4], v[5], v[6], time.UTC), nil
}

func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}

// FuzzParseClassic: any input gives sections or an error with its line,
// never a panic.
func FuzzParseClassic(f *testing.F) {
	for name := range fluentExamples {
		b, _ := os.ReadFile(name)
		f.Add(string(b))
	}
	f.Add("[INPUT]\nName tail\n")
	f.Add("  key value\n[")
	f.Fuzz(func(t *testing.T, src string) {
		secs, err := parseClassic(src)
		if err != nil && !strings.HasPrefix(err.Error(), "line ") {
			t.Fatalf("error without a line: %v", err)
		}
		for _, s := range secs {
			for _, e := range s.entries {
				if e[0] == "" || e[1] == "" {
					t.Fatalf("empty entry %q in %q", e, src)
				}
			}
		}
	})
}
