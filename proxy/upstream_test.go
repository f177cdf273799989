package proxy

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestPooledUpstreamClosedByServer: the server closes a connection the
// proxy pooled; the next request must still be answered (on a fresh
// connection), not fail with the dead one.
func TestPooledUpstreamClosedByServer(t *testing.T) {
	e := newEnv(t)
	c := e.explicitClient()
	for i, path := range []string{"/drop", "/after-drop", "/drop", "/after-drop-2"} {
		resp, err := c.Get(fmt.Sprintf("http://plain.example.test:%d%s", e.w.plainPort, path))
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d (%s): status %d %q", i, path, resp.StatusCode, body)
		}
	}
	if n := len(e.w.requests()); n != 4 {
		t.Fatalf("origin saw %d requests, want 4", n)
	}
}

// TestUpstreamReuse: a pooled connection is reused by later requests to
// the same name.
func TestUpstreamReuse(t *testing.T) {
	e := newEnv(t)
	c := e.transparentClient(e.worldDst(), false)
	for i := range 3 {
		resp, err := c.Get(e.url("docs.example.test", fmt.Sprintf("/r%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		readAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if d := e.dials.list(); len(d) != 1 {
		t.Fatalf("three requests dialed %d times: %v", len(d), d)
	}
}

// TestIdleUpstreamReaped: pooled connections idle longer than the idle
// timeout are closed even when no request comes for their host again.
func TestIdleUpstreamReaped(t *testing.T) {
	old := upIdleTimeout
	upIdleTimeout = 50 * time.Millisecond
	t.Cleanup(func() { upIdleTimeout = old })
	e := newEnv(t)
	resp, err := e.transparentClient(e.worldDst(), false).Get(e.url("docs.example.test", "/idle"))
	if err != nil {
		t.Fatal(err)
	}
	readAll(resp.Body)
	resp.Body.Close()
	u := e.p.transportFor("sb1")
	pooled := u.pool.Idle
	if pooled() != 1 {
		t.Fatalf("%d connections pooled after a request, want 1", pooled())
	}
	for deadline := time.Now().Add(5 * time.Second); pooled() > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections still pooled", pooled())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
