package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"airlock/audit"
)

// TestResponseAfterClientReset: a client that resets its connection in
// the middle of a response costs only that connection. The proxy's next
// write to it fails (close reason write-error), and every later client
// still gets its whole response — none reads EOF. (The response writers
// are pooled: one given back with its failed write's error still in its
// buffer failed the next connection's first write, before a byte of its
// response left, so that client read EOF.)
func TestResponseAfterClientReset(t *testing.T) {
	// One P: the writer the reset connection gives back is the one the
	// next connection takes.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	e := newEnv(t)
	origin := fmt.Sprintf("plain.example.test:%d", e.w.plainPort)
	cl := e.explicitClient()
	for i := range 5 {
		src := resetMidResponse(t, e, origin)
		ev := e.ev.waitFor(t, "the reset connection's close", func(ev audit.Event) bool {
			return ev.Kind == audit.KindFlow && ev.Flow.Stage == "close" && ev.Flow.Source == src
		})
		if ev.Flow.CloseReason != string(reasonWriteError) {
			t.Fatalf("round %d: the reset connection closed with %q, want %q", i, ev.Flow.CloseReason, reasonWriteError)
		}
		resp, err := cl.Get("http://" + origin + "/p")
		if err != nil {
			t.Fatalf("round %d: a request after a client reset: %v", i, err)
		}
		body := readAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(body, "origin GET") {
			t.Fatalf("round %d: a request after a client reset: status %d, body %q", i, resp.StatusCode, body)
		}
	}
}

// resetMidResponse asks origin for /hold through the explicit listener,
// reads the first part of the body, resets the connection, then lets the
// origin send the rest. It returns the client's address.
func resetMidResponse(t *testing.T, e *env, origin string) string {
	t.Helper()
	c := dialExplicit(t, e)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET http://%s/hold HTTP/1.1\r\nHost: %s\r\n\r\n", origin, origin)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("/hold: %v", err)
	}
	first := make([]byte, len("first part"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first part" {
		t.Fatalf("/hold: first part %q: %v", first, err)
	}
	src := c.LocalAddr().String()
	c.(*net.TCPConn).SetLinger(0) // the close sends a reset
	c.Close()
	e.w.trickle <- struct{}{}
	return src
}
