package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// captureHello returns the bytes a real crypto/tls client sends first.
func captureHello(t testing.TB, conf *tls.Config) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		c := tls.Client(a, conf)
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Handshake()
	}()
	b.SetDeadline(time.Now().Add(2 * time.Second))
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := b.Read(buf)
		out = append(out, buf[:n]...)
		if _, perr := ParseClientHello(out); !errors.Is(perr, ErrNeedMore) || err != nil {
			return out
		}
	}
}

// splitRecords re-frames one handshake record as several records of at
// most size payload bytes each.
func splitRecords(rec []byte, size int) []byte {
	payload := rec[recordHeaderLen:]
	var out []byte
	for len(payload) > 0 {
		n := min(size, len(payload))
		out = append(out, 22, 3, 1, byte(n>>8), byte(n))
		out = append(out, payload[:n]...)
		payload = payload[n:]
	}
	return out
}

func TestParseClientHello(t *testing.T) {
	hello := captureHello(t, &tls.Config{ServerName: "git.example.test", NextProtos: []string{"h2", "http/1.1"}, InsecureSkipVerify: true})
	want := Hello{ServerName: "git.example.test", ALPN: []string{"h2", "http/1.1"}}
	cases := map[string][]byte{
		"one record":        hello,
		"records of 1 byte": splitRecords(hello, 1),
		"records of 7":      splitRecords(hello, 7),
		"records of 100":    splitRecords(hello, 100),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseClientHello(b)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("(-want +got)\n%s", d)
			}
			// Every strict prefix (a TCP segment boundary) needs more.
			for i := 0; i < len(b); i += 1 + len(b)/50 {
				if _, err := ParseClientHello(b[:i]); !errors.Is(err, ErrNeedMore) {
					t.Fatalf("prefix %d/%d: err = %v, want ErrNeedMore", i, len(b), err)
				}
			}
		})
	}
	noSNI := captureHello(t, &tls.Config{InsecureSkipVerify: true})
	if h, err := ParseClientHello(noSNI); err != nil || h.ServerName != "" {
		t.Fatalf("no SNI: %+v %v", h, err)
	}
}

func TestParseClientHelloRejects(t *testing.T) {
	hello := captureHello(t, &tls.Config{ServerName: "a.example.test", InsecureSkipVerify: true})
	bad := func(f func([]byte) []byte) []byte { return f(bytes.Clone(hello)) }
	cases := map[string]struct {
		b    []byte
		want error
	}{
		"http":            {[]byte("GET / HTTP/1.1\r\n"), ErrNotTLS},
		"ssh":             {[]byte("SSH-2.0-x\r\n"), ErrNotTLS},
		"not version 3":   {[]byte{22, 2, 0, 0, 5}, ErrNotTLS},
		"zero record":     {[]byte{22, 3, 1, 0, 0}, nil},
		"server hello":    {bad(func(b []byte) []byte { b[5] = 2; return b }), nil},
		"huge handshake":  {[]byte{22, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff}, nil},
		"alert inside":    {append(splitRecords(hello, 10)[:15], 21, 3, 3, 0, 2, 2, 40), nil},
		"truncated inner": {bad(func(b []byte) []byte { b[8] = 0x10; return b[:12] }), ErrNeedMore},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseClientHello(c.b)
			if err == nil {
				t.Fatal("accepted")
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if c.want == nil && (errors.Is(err, ErrNeedMore) || errors.Is(err, ErrNotTLS)) {
				t.Fatalf("err = %v, want a parse error", err)
			}
		})
	}
}

func FuzzClientHello(f *testing.F) {
	hello := captureHello(f, &tls.Config{ServerName: "git.example.test", NextProtos: []string{"h2"}, InsecureSkipVerify: true})
	f.Add(hello)
	f.Add(splitRecords(hello, 3))
	f.Add(hello[:40])
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{22, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseClientHello(b)
		if err != nil {
			return
		}
		if len(h.ServerName) > 255 || len(h.ALPN) > 16 {
			t.Fatalf("bounds: %+v", h)
		}
		// Re-framing a parsed hello into small records parses the same.
		if b[0] == 22 && len(b) > recordHeaderLen {
			n := int(b[3])<<8 | int(b[4])
			if recordHeaderLen+n <= len(b) {
				if h2, err := ParseClientHello(splitRecords(b[:recordHeaderLen+n], 5)); err == nil && h2.ServerName != h.ServerName {
					t.Fatalf("re-framed SNI %q != %q", h2.ServerName, h.ServerName)
				}
			}
		}
	})
}
