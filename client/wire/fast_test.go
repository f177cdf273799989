package wire

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// nasty are strings that JSON escapes in every way encoding/json knows.
var nasty = []string{"", "echo", "hi there", `"quoted" \back\slash`, "<tag>&amp;", "tab\tnl\nret\rbs\bff\f",
	"\x00\x01\x1f\x7f", "caf\xc3\xa9", "bad\xffutf8\xc3", "line\u2028sep\u2029", "emoji \U0001F600", "\xed\xa0\x80 surrogate",
	"=,:;{}[]", strings.Repeat("x", 300)}

func randString(r *rand.Rand) string {
	if r.IntN(3) == 0 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return string(b)
	}
	return nasty[r.IntN(len(nasty))]
}

func randRequest(r *rand.Rand) ExecRequest {
	var q ExecRequest
	for range r.IntN(4) {
		q.Argv = append(q.Argv, randString(r))
	}
	if r.IntN(3) == 0 {
		q.Shell = randString(r)
	}
	if r.IntN(2) == 0 {
		q.Cwd = randString(r)
	}
	if r.IntN(2) == 0 {
		q.User = randString(r)
	}
	if n := r.IntN(4); n > 0 {
		q.Env = map[string]string{}
		for range n {
			q.Env[randString(r)] = randString(r)
		}
	}
	if r.IntN(2) == 0 {
		q.Stdin = []byte(randString(r))
	}
	if r.IntN(2) == 0 {
		q.Timeout = Duration(time.Duration(r.Int64N(int64(48 * time.Hour))))
	}
	q.Background, q.TTY = r.IntN(2) == 0, r.IntN(4) == 0
	if r.IntN(3) == 0 {
		q.Rows, q.Cols = uint16(r.IntN(70000)), uint16(r.IntN(300))
	}
	return q
}

// TestFastCodecMatchesJSON: AppendExecRequest writes json.Marshal's bytes;
// the stream reader reads what encoding/json reads, frame for frame, and
// takes its fast path for the frames the appliance writes.
func TestFastCodecMatchesJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		q := randRequest(r)
		want, err := json.Marshal(q)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendExecRequest(nil, &q); !bytes.Equal(got, want) {
			t.Fatalf("request %d %#v:\n got %s\nwant %s", i, q, got, want)
		}
	}
	for i := range 3000 {
		var frames []ExecFrame
		for range r.IntN(4) {
			data := []byte(randString(r))
			if len(data) == 0 {
				data = []byte{0}
			}
			frames = append(frames, ExecFrame{Stream: []string{"stdout", "stderr"}[r.IntN(2)], Data: data})
		}
		res := ExecResult{ID: randString(r), ExitCode: r.IntN(512) - 256, DurationMS: r.Int64N(1 << 40),
			TimedOut: r.IntN(2) == 0, Killed: r.IntN(2) == 0, Limit: []string{"", LimitTimeout, LimitCPU}[r.IntN(3)],
			Truncated: r.IntN(2) == 0, Agent: []string{"", "airlock-init", randString(r)}[r.IntN(3)], Pid: r.IntN(1 << 22),
			Signal: []string{"", "SIGKILL", randString(r)}[r.IntN(3)], Running: r.IntN(5) == 0, UtimeUS: r.Int64N(1 << 30),
			StimeUS: r.Int64N(1 << 30), MaxRSSKB: r.Int64N(1 << 30), StdoutBytes: r.Int64N(1 << 50), StderrBytes: -r.Int64N(3)}
		last := ExecFrame{Exit: &res}
		if r.IntN(5) == 0 {
			last = ExecFrame{Error: &Error{Code: "invalid", Message: randString(r), RequestID: randString(r)}}
		}
		frames = append(frames, last)
		var stream bytes.Buffer
		enc := json.NewEncoder(&stream) // as the appliance writes them
		for _, f := range frames {
			if err := enc.Encode(f); err != nil {
				t.Fatal(err)
			}
		}
		var wantOut, wantErr bytes.Buffer
		var wantRes ExecResult
		var wantE error
		dec := json.NewDecoder(bytes.NewReader(stream.Bytes()))
		for {
			var f ExecFrame
			if err := dec.Decode(&f); err != nil {
				t.Fatal(err)
			}
			if f.Exit != nil {
				wantRes = *f.Exit
				break
			}
			if f.Error != nil {
				wantE = f.Error
				break
			}
			map[string]*bytes.Buffer{"stdout": &wantOut, "stderr": &wantErr}[f.Stream].Write(f.Data)
		}
		var gotOut, gotErr bytes.Buffer
		gotRes, gotE := ReadExecFrames(bytes.NewReader(stream.Bytes()), &gotOut, &gotErr)
		if !reflect.DeepEqual(gotRes, wantRes) || !reflect.DeepEqual(gotE, wantE) ||
			!bytes.Equal(gotOut.Bytes(), wantOut.Bytes()) || !bytes.Equal(gotErr.Bytes(), wantErr.Bytes()) {
			t.Fatalf("stream %d:\n%s\ngot %+v %v %q %q\nwant %+v %v %q %q", i, stream.Bytes(),
				gotRes, gotE, gotOut.Bytes(), gotErr.Bytes(), wantRes, wantE, wantOut.Bytes(), wantErr.Bytes())
		}
	}
	// The frames of a plain command take the fast path.
	for _, line := range []string{`{"stream":"stdout","data":"aGkK"}`, `{"stream":"stderr","data":"AP8="}`,
		`{"exit":{"id":"2e3dba31a807","exit_code":0,"duration_ms":1,"agent":"airlock-init","pid":2417,"utime_us":312,"maxrss_kb":1404,"stdout_bytes":3}}`,
		`{"exit":{"exit_code":-1,"duration_ms":30001,"timed_out":true,"killed":true,"limit":"timeout","signal":"SIGKILL"}}`} {
		var f ExecFrame
		if !parseFrameFast([]byte(line), &f) {
			t.Errorf("not read on the fast path: %s", line)
		}
	}
}

// FuzzFastFrame: a line the fast path takes is valid JSON that
// encoding/json reads as the same frame.
func FuzzFastFrame(f *testing.F) {
	for _, s := range []string{`{"stream":"stdout","data":"aGkK"}`, `{"exit":{"id":"a","exit_code":0,"duration_ms":3}}`,
		`{"exit":{"exit_code":01}}`, `{"exit":{"pid":"1"}}`, `{"stream":"stderr","data":"=="}`, `{"exit":{"id":"a\"b"}}`,
		`{"exit":{"exit_code":9223372036854775808}}`, `{"exit":{"signal":"x","killed":true,}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var fast ExecFrame
		if !parseFrameFast(line, &fast) {
			return
		}
		var slow ExecFrame
		if err := json.Unmarshal(line, &slow); err != nil {
			t.Fatalf("fast path took %q, encoding/json refuses it: %v", line, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: fast %+v, encoding/json %+v", line, fast, slow)
		}
	})
}
