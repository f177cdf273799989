package h1

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"runtime"
	"syscall"
	"testing"
	"time"

	"airlock/proxy/internal/rawio"
)

// recConn is a client connection that records what is written to it, or
// fails every write as a socket the client reset does.
type recConn struct {
	net.Conn // nil: only what a Writer calls is implemented
	out      bytes.Buffer
	fail     bool
}

func (c *recConn) Write(p []byte) (int, error) {
	if c.fail {
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}
	}
	return c.out.Write(p)
}

func (c *recConn) SetWriteDeadline(time.Time) error { return nil }

// respond writes one response with body on c through a pooled Writer,
// aborting it when abort is set, and gives the Writer back.
func respond(c *recConn, body string, chunked, abort bool) error {
	req := &http.Request{Method: "GET", ProtoMajor: 1, ProtoMinor: 1}
	w := GetWriter(c, nil, req, time.Minute, rawio.LazyDeadline{}, nil)
	defer PutWriter(w)
	if !chunked {
		w.Header().Set("Content-Length", "5")
	}
	w.WriteHeader(http.StatusOK)
	w.Write([]byte(body))
	if abort {
		w.Abort()
	}
	_, err := w.Finish()
	return err
}

// TestPooledWriterCarriesNothingOver: a response that failed — the
// client reset the connection, or the proxy aborted it — leaves nothing
// in the pooled Writer: the next response, on another connection, is
// written whole, with neither the old write error nor the old bytes.
// (Before the fix the next connection's writes failed with the old
// "broken pipe", so its client read EOF; an aborted response's buffered
// bytes went out ahead of the next connection's response.)
func TestPooledWriterCarriesNothingOver(t *testing.T) {
	// One P: a Writer put back is the one the next GetWriter takes.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	want := "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh"
	for i := range 8 {
		if err := respond(&recConn{fail: true}, "dying", true, false); !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("round %d: the reset connection's response: %v, want a broken pipe", i, err)
		}
		next := &recConn{}
		if err := respond(next, "fresh", false, false); err != nil {
			t.Fatalf("round %d: the next connection's response after a reset one: %v", i, err)
		}
		if got := next.out.String(); got != want {
			t.Fatalf("round %d: after a reset connection, the next one got %q, want %q", i, got, want)
		}

		if err := respond(&recConn{}, "SECRT", false, true); !errors.Is(err, errResponseAborted) {
			t.Fatalf("round %d: aborted response: %v", i, err)
		}
		next = &recConn{}
		if err := respond(next, "fresh", false, false); err != nil {
			t.Fatalf("round %d: the next connection's response after an aborted one: %v", i, err)
		}
		if got := next.out.String(); got != want {
			t.Fatalf("round %d: after an aborted response, the next connection got %q, want %q", i, got, want)
		}
	}
}

// phraser gives every final status the same reason phrase.
type phraser string

func (p phraser) Upgraded()         {}
func (p phraser) Phrase(int) string { return string(p) }

// TestWriterPhrase: a Phraser's reason phrase is the status line's, with
// anything that could end the line or is not visible ASCII replaced; an
// empty one is the standard text.
func TestWriterPhrase(t *testing.T) {
	cases := []struct{ phrase, want string }{
		{"Forbidden (airlock: package_too_new: a@2.0.0)", "HTTP/1.1 403 Forbidden (airlock: package_too_new: a@2.0.0)\r\n"},
		{"Forbidden\r\nSet-Cookie: x=1", "HTTP/1.1 403 Forbidden??Set-Cookie: x=1\r\n"},
		{"caf\u00e9\x00", "HTTP/1.1 403 caf??\r\n"},
		{"", "HTTP/1.1 403 Forbidden\r\n"},
	}
	for _, c := range cases {
		rc := &recConn{}
		req := &http.Request{Method: "GET", ProtoMajor: 1, ProtoMinor: 1}
		w := GetWriter(rc, nil, req, time.Minute, rawio.LazyDeadline{}, phraser(c.phrase))
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusForbidden)
		w.Finish()
		PutWriter(w)
		if got, _, _ := bytes.Cut(rc.out.Bytes(), []byte("\n")); string(got)+"\n" != c.want {
			t.Errorf("phrase %q: status line %q, want %q", c.phrase, got, c.want)
		}
	}
}
