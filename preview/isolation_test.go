package preview

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// Ended and unknown previews get a small page, never the app.
func TestEndedAndUnknownPreviews(t *testing.T) {
	r := newRig(t, Limits{})
	_, port := app(t)
	a, la := r.expose(t, port)
	b, lb := r.expose(t, port)
	ckA, ckB := r.open(t, la["alice"]), r.open(t, lb["alice"])
	if err := r.m.Revoke("sb2", a.ID, "alice"); err == nil {
		t.Error("revoked through another sandbox")
	}
	if err := r.m.Revoke("sb1", a.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	c := r.client()
	resp, body := get(t, c, a.URL, "Cookie", ckA)
	if resp.StatusCode != http.StatusGone || !strings.Contains(body, "revoked") {
		t.Errorf("revoked: %d %q, want 410 saying revoked", resp.StatusCode, body)
	}
	r.advance(31 * time.Minute)
	waitFor(t, func() bool { return len(r.ev.stage("expired")) == 1 })
	resp, body = get(t, c, b.URL, "Cookie", ckB)
	if resp.StatusCode != http.StatusGone || !strings.Contains(body, "ttl") {
		t.Errorf("expired: %d %q, want 410", resp.StatusCode, body)
	}
	resp, _ = get(t, c, "https://pv0123456789abcdef."+testHost+"/")
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown: %d, want 404", resp.StatusCode)
	}
	if len(r.ev.stage("revoked")) != 1 {
		t.Errorf("revoked events %+v", r.ev.stage("revoked"))
	}
}

// A port nobody listens on answers 502 naming it, at once.
func TestNotListening(t *testing.T) {
	r := newRig(t, Limits{})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	p, l := r.expose(t, port)
	start := time.Now()
	resp, body := get(t, r.client(), p.URL, "Cookie", r.open(t, l["alice"]))
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, fmt.Sprintf("port %d", port)) {
		t.Errorf("%d %q, want 502 naming port %d", resp.StatusCode, body, port)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %s", d)
	}
}

// Host tricks, absolute-form, CONNECT and traversal in the id are refused
// by the listener and never reach the app or another address.
func TestHostTricks(t *testing.T) {
	r := newRig(t, Limits{})
	_, port := app(t)
	p, l := r.expose(t, port)
	ck := r.open(t, l["alice"])
	id := p.ID
	cases := []struct{ name, raw string }{
		{"other suffix", "GET / HTTP/1.1\r\nHost: " + id + ".evil.test\r\nCookie: " + ck + "\r\n\r\n"},
		{"bare host", "GET / HTTP/1.1\r\nHost: " + testHost + "\r\nCookie: " + ck + "\r\n\r\n"},
		{"nested", "GET / HTTP/1.1\r\nHost: x." + id + "." + testHost + "\r\nCookie: " + ck + "\r\n\r\n"},
		{"traversal", "GET / HTTP/1.1\r\nHost: ..%2f" + id + "." + testHost + "\r\nCookie: " + ck + "\r\n\r\n"},
		{"encoded dots in the id", "GET / HTTP/1.1\r\nHost: " + id + "%2e%2e." + testHost + "\r\nCookie: " + ck + "\r\n\r\n"},
		{"slash in the host", "GET / HTTP/1.1\r\nHost: " + id + "/../" + id + "." + testHost + "\r\nCookie: " + ck + "\r\n\r\n"},
		{"id of another form", "GET / HTTP/1.1\r\nHost: " + strings.ToUpper(id[:2]) + id[2:] + "0." + testHost + "\r\nCookie: " + ck + "\r\n\r\n"},
		{"traversal in the path to another port", "GET /../../127.0.0.1:22/ HTTP/1.1\r\nHost: x" + id[1:] + "." + testHost + "\r\nCookie: " + ck + "\r\n\r\n"},
		{"ip", "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: " + ck + "\r\n\r\n"},
		{"absolute-form", "GET http://127.0.0.1:" + fmt.Sprint(port) + "/ HTTP/1.1\r\nHost: " + id + "." + testHost + "\r\nCookie: " + ck + "\r\n\r\n"},
		{"absolute-form to itself", "GET https://" + id + "." + testHost + "/ HTTP/1.1\r\nHost: " + id + "." + testHost + "\r\nCookie: " + ck + "\r\n\r\n"},
		{"connect", "CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: " + id + "." + testHost + "\r\nCookie: " + ck + "\r\n\r\n"},
		{"no host", "GET / HTTP/1.0\r\nCookie: " + ck + "\r\n\r\n"},
	}
	for _, tc := range cases {
		status, body := r.raw(t, tc.raw)
		if status/100 != 4 || strings.Contains(body, "app ") {
			t.Errorf("%s: %d %q, want a 4xx from the listener", tc.name, status, body)
		}
	}
}

// raw sends one request over TLS (HTTP/1.1) and returns status and body.
func (r *rig) raw(t *testing.T, req string) (int, string) {
	t.Helper()
	c, err := tls.Dial("tcp", r.srv.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// An open WebSocket is closed within a second of a revoke or an expiry.
func TestEndClosesWebSocket(t *testing.T) {
	for _, how := range []string{"revoke", "expire"} {
		t.Run(how, func(t *testing.T) {
			r := newRig(t, Limits{})
			_, port := app(t)
			p, l := r.expose(t, port)
			ws := r.websocket(t, p, r.open(t, l["alice"]))
			echo(t, ws, "hello")
			start := time.Now()
			if how == "revoke" {
				_ = r.m.Revoke("sb1", p.ID, "alice")
			} else {
				r.advance(31 * time.Minute)
			}
			_ = ws.SetReadDeadline(time.Now().Add(3 * time.Second))
			var buf [16]byte
			_, err := ws.Read(buf[:])
			if err == nil || time.Since(start) > time.Second {
				t.Fatalf("websocket still open %s after %s (read err %v)", time.Since(start), how, err)
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("websocket not closed: %v", err)
			}
		})
	}
}

func (r *rig) websocket(t *testing.T, p Preview, cookie string) *websocket.Conn {
	t.Helper()
	cfg, err := websocket.NewConfig("wss://"+hostOf(p.URL)+"/ws", p.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Header.Set("Cookie", cookie)
	cfg.TlsConfig = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}
	cfg.Dialer = &net.Dialer{}
	tc, err := tls.Dial("tcp", r.srv.Listener.Addr().String(), cfg.TlsConfig)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := websocket.NewClient(cfg, tc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

func echo(t *testing.T, ws *websocket.Conn, msg string) {
	t.Helper()
	if err := websocket.Message.Send(ws, msg); err != nil {
		t.Fatal(err)
	}
	var got string
	_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	if err := websocket.Message.Receive(ws, &got); err != nil || got != msg {
		t.Fatalf("echo %q, %v", got, err)
	}
}

func waitFor(t *testing.T, f func() bool) {
	t.Helper()
	for i := 0; i < 100; i++ {
		if f() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("condition not met in 2s")
}

// Oversize headers get 431; a client that never finishes its headers is
// cut off at ReadHeaderTimeout; the connection count is bounded.
func TestBadInputBounded(t *testing.T) {
	r := newRig(t, Limits{ReadHeaderTimeout: 300 * time.Millisecond, MaxHeaderBytes: 4 << 10})
	status, _ := r.raw(t, "GET / HTTP/1.1\r\nHost: x."+testHost+"\r\nX-Big: "+strings.Repeat("a", 64<<10)+"\r\n\r\n")
	if status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("oversize headers: %d, want 431", status)
	}
	c, err := tls.Dial("tcp", r.srv.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadAll(c)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("slowloris held for %s (%v), want cut at ~300ms", d, err)
	}
	status, body := r.raw(t, "GET / HTTP/1.1\r\nHost: "+strings.Repeat("a", 300)+"."+testHost+"\r\n\r\n")
	if status != http.StatusBadRequest || !strings.Contains(body, "host name of") {
		t.Errorf("long host: %d %q", status, body)
	}
}

// Each preview has its own rate limit: over it 429, another preview
// unaffected.
func TestRateLimitPerPreview(t *testing.T) {
	r := newRig(t, Limits{}, func(c *Config) { c.Rate, c.Burst = 0.001, 3 })
	_, port := app(t)
	a, _ := r.expose(t, port)
	b, _ := r.expose(t, port)
	c := r.client()
	auth := []string{"Authorization", "Bearer tok-alice"}
	for i := 0; i < 3; i++ {
		if resp, _ := get(t, c, a.URL, auth...); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	if resp, _ := get(t, c, a.URL, auth...); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("over the limit: %d, want 429 with Retry-After", resp.StatusCode)
	}
	if resp, _ := get(t, c, b.URL, auth...); resp.StatusCode != 200 {
		t.Errorf("another preview: %d, want 200", resp.StatusCode)
	}
}

// Slow clients hold bounded resources: with MaxConns 4, twenty clients
// that stall in the TLS handshake or in their headers never have more
// than 4 connections open in the server at once; each is cut off (its
// read ends, not timed out on the client's side), and the listener then
// serves a normal request.
func TestSlowClientsBounded(t *testing.T) {
	lim := Limits{ReadHeaderTimeout: 300 * time.Millisecond, MaxConns: 4}
	m, err := New(Config{Host: testHost, Key: []byte(strings.Repeat("k", 32)), Dial: loopDialer})
	if err != nil {
		t.Fatal(err)
	}
	hs := m.Server(nil, lim)
	var mu sync.Mutex
	open, most := 0, 0
	hs.ConnState = func(_ net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch s {
		case http.StateNew:
			open++
			most = max(most, open)
		case http.StateClosed, http.StateHijacked:
			open--
		}
	}
	srv := httptest.NewUnstartedServer(hs.Handler)
	srv.Config = hs
	srv.Listener = Listen(srv.Listener, lim)
	srv.StartTLS()
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- stall(addr, i%2 == 0)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
	resp, err := c.Get("https://" + addr + "/")
	if err != nil {
		t.Fatalf("a normal request after the slow clients: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a normal request after the slow clients: %d, want the listener's 400 (bad host)", resp.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	if most > lim.MaxConns {
		t.Errorf("%d connections open in the server at once, want at most %d", most, lim.MaxConns)
	}
}

// stall connects and stalls: in the TLS handshake (nothing sent), or
// after it in the middle of a request's headers. It returns an error
// unless the server cuts the connection.
func stall(addr string, inHandshake bool) error {
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer raw.Close()
	c := raw
	if !inHandshake {
		tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		_ = tc.SetDeadline(time.Now().Add(30 * time.Second))
		if err := tc.Handshake(); err != nil {
			return fmt.Errorf("handshake: %w", err)
		}
		if _, err := io.WriteString(tc, "GET / HTTP/1.1\r\nHost: x"); err != nil {
			return err
		}
		c = tc
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return fmt.Errorf("a stalled client (in the handshake: %v) was never cut off", inHandshake)
	}
	return nil
}
