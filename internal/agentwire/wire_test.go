package agentwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var b bytes.Buffer
	big := bytes.Repeat([]byte{0xff, 0x00, 0xc3}, 100000) // binary, invalid UTF-8
	for _, f := range []struct {
		t Type
		p []byte
	}{{TRequest, []byte(`{"v":1}`)}, {TStdout, big}, {TStdinEOF, nil}, {TData, []byte{}}} {
		if err := WriteFrame(&b, f.t, f.p); err != nil {
			t.Fatal(err)
		}
	}
	r := NewReader(&b)
	for _, want := range []Type{TRequest, TStdout, TStdinEOF, TData} {
		ty, p, err := r.Next()
		if err != nil || ty != want {
			t.Fatalf("got %v %v, want %v", ty, err, want)
		}
		if ty == TStdout && !bytes.Equal(p, big) {
			t.Fatal("binary payload changed")
		}
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("end: %v, want io.EOF", err)
	}
	if err := WriteFrame(io.Discard, TData, make([]byte, MaxData+1)); !errors.Is(err, ErrFrame) {
		t.Fatalf("oversized write: %v", err)
	}
}

func frame(n uint32, rest ...byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, n)
	return append(b, rest...)
}

func TestFrameErrors(t *testing.T) {
	for name, c := range map[string]struct {
		in   []byte
		want string
	}{
		"zero length":  {frame(0), "length 0"},
		"huge length":  {frame(1 << 30), "exceeds"},
		"unknown type": {frame(1, 99), "unknown type 99"},
		"type zero":    {frame(1, 0), "unknown type 0"},
		"eof payload":  {frame(3, byte(TStdinEOF), 1, 2), "want none"},
		"short":        {frame(10, byte(TData), 1), "unexpected EOF"},
		"cut header":   {frame(5), "unexpected EOF"},
	} {
		_, _, err := NewReader(bytes.NewReader(c.in)).Next()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

func TestDecodeRequestErrors(t *testing.T) {
	huge := strings.Repeat("a", MaxArgBytes+1)
	many := `"` + strings.Repeat(`x","`, MaxArgs) + `x"`
	for name, c := range map[string]struct{ in, want string }{
		"version":       {`{"v":2,"op":"ps"}`, "protocol version 2"},
		"unknown field": {`{"v":1,"op":"ps","bogus":1}`, `unknown field "bogus"`},
		"trailing":      {`{"v":1,"op":"ps"}{}`, "trailing data"},
		"no op":         {`{"v":1}`, "no op"},
		"unknown op":    {`{"v":1,"op":"fly"}`, `unknown op "fly"`},
		"empty argv":    {`{"v":1,"op":"exec","id":"a"}`, "empty argv"},
		"empty argv0":   {`{"v":1,"op":"exec","id":"a","argv":[""]}`, "argv[0] is empty"},
		"both":          {`{"v":1,"op":"exec","id":"a","argv":["x"],"shell":"x"}`, "both argv and a shell"},
		"no id":         {`{"v":1,"op":"exec","argv":["x"]}`, "id: empty"},
		"bad id":        {`{"v":1,"op":"exec","id":"a/b","argv":["x"]}`, "is not [A-Za-z0-9_-]"},
		"huge arg":      {`{"v":1,"op":"exec","id":"a","argv":["x","` + huge + `"]}`, "argv[1]: 131073 bytes"},
		"many args":     {`{"v":1,"op":"exec","id":"a","argv":[` + many + `]}`, "4097 arguments"},
		"nul arg":       {`{"v":1,"op":"exec","id":"a","argv":["a\u0000b"]}`, "argv[0]: contains a NUL"},
		"env no =":      {`{"v":1,"op":"exec","id":"a","argv":["x"],"env":["FOO"]}`, `env[0]: "FOO" is not KEY=VALUE`},
		"env empty":     {`{"v":1,"op":"exec","id":"a","argv":["x"],"env":["=x"]}`, "env[0]: empty variable name"},
		"cwd relative":  {`{"v":1,"op":"exec","id":"a","argv":["x"],"cwd":"tmp"}`, "not an absolute path"},
		"bad user":      {`{"v":1,"op":"exec","id":"a","argv":["x"],"user":"a b"}`, "is not allowed"},
		"neg timeout":   {`{"v":1,"op":"exec","id":"a","argv":["x"],"timeout_ms":-1}`, "timeout_ms -1"},
		"bg stdin":      {`{"v":1,"op":"exec","id":"a","argv":["x"],"background":true,"stdin":true}`, "background command cannot take stdin"},
		"signal":        {`{"v":1,"op":"signal","id":"a","signal":"FOO"}`, `unknown signal "FOO"`},
		"signal num":    {`{"v":1,"op":"signal","id":"a","signal":"99"}`, "signal 99 out of"},
		"neg size":      {`{"v":1,"op":"write","path":"/a","size":-5}`, "negative size -5"},
		"neg max":       {`{"v":1,"op":"read","path":"/a","max":-1}`, "negative max -1"},
		"rel path":      {`{"v":1,"op":"read","path":"a"}`, "not an absolute path"},
		"mode":          {`{"v":1,"op":"write","path":"/a","mode":65535}`, "bits beyond"},
		"write root":    {`{"v":1,"op":"write","path":"/"}`, "not a file"},
		"proto":         {`{"v":1,"op":"sockowner","proto":"sctp","port":1}`, `proto "sctp"`},
		"port":          {`{"v":1,"op":"sockowner","proto":"tcp","port":70000}`, "port 70000"},
		"local":         {`{"v":1,"op":"sockowner","proto":"tcp","port":1,"local":"1.2.3"}`, `local "1.2.3"`},
		"remote":        {`{"v":1,"op":"sockowner","proto":"udp","port":1,"remote":"198.18.0.1"}`, `remote "198.18.0.1"`},
		"neg size type": {`{"v":1,"op":"write","path":"/a","size":"x"}`, "cannot unmarshal"},
	} {
		_, err := DecodeRequest([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want %q (ErrInvalid)", name, err, c.want)
		}
	}
	if _, err := DecodeRequest([]byte(`{"v":1,"op":"exec","id":"x1","argv":["sh","-c","echo"],"env":["A=b=c"],"user":"1000:1000"}`)); err != nil {
		t.Fatalf("valid request refused: %v", err)
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]int{"TERM": 15, "sigkill": 9, "SIGWINCH": 28, "2": 2} {
		if s, err := ParseSignal(in); err != nil || int(s) != want {
			t.Errorf("%s: %v %v", in, s, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(frame(8, append([]byte{byte(TRequest)}, `{"v":1}`...)...))
	f.Add(append(frame(18, byte(TRequest)), `{"v":1,"op":"ps"}`...))
	f.Add(frame(2, byte(TStdout), 0xff))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bytes.NewReader(in))
		for {
			ty, p, err := r.Next()
			if err != nil {
				return
			}
			if len(p)+1 > MaxFrame || !ty.Valid() {
				t.Fatalf("accepted a bad frame: %v %d", ty, len(p))
			}
			if ty == TRequest {
				if req, err := DecodeRequest(p); err == nil {
					if req.Validate() != nil {
						t.Fatal("decoded request does not validate")
					}
				} else if !errors.Is(err, ErrInvalid) {
					t.Fatalf("request error without ErrInvalid: %v", err)
				}
			} else if ty == TResult {
				_, _ = DecodeResult(p)
			}
		}
	})
}
