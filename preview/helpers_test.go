package preview

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"airlock/audit"
)

const testHost = "preview.example.test"

// events collects what a Manager emits.
type events struct {
	mu sync.Mutex
	es []audit.Event
}

func (e *events) Emit(ev audit.Event) { e.mu.Lock(); e.es = append(e.es, ev); e.mu.Unlock() }

func (e *events) of(kind audit.Kind) []audit.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []audit.Event
	for _, ev := range e.es {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// stage returns the preview events of one stage.
func (e *events) stage(s string) []audit.Event {
	var out []audit.Event
	for _, ev := range e.of(audit.KindPreview) {
		if ev.Preview.Stage == s {
			out = append(out, ev)
		}
	}
	return out
}

// app is the sandbox's dev server: a page, a WebSocket echo, cookies.
func app(t *testing.T) (*httptest.Server, uint16) {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen-Host", r.Host)
		w.Header().Set("X-Seen-Cookie", r.Header.Get("Cookie"))
		w.Header().Set("X-Seen-Auth", r.Header.Get("Authorization"))
		fmt.Fprintf(w, "app %s %s", r.Method, r.URL.RequestURI())
	})
	mux.HandleFunc("/cookies", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", "own=1; Path=/")
		w.Header().Add("Set-Cookie", "parent=1; Domain="+testHost+"; Path=/")
		w.Header().Add("Set-Cookie", "sneaky=1; Path=/; dOmAiN=example.test")
		w.Header().Add("Set-Cookie", cookieName+"=x; Path=/")
	})
	mux.Handle("/ws", websocket.Handler(func(c *websocket.Conn) { _, _ = io.Copy(c, c) }))
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s, uint16(s.Listener.Addr().(*net.TCPAddr).Port)
}

// loopDialer dials 127.0.0.1:port (the test's stand-in for the netns).
func loopDialer(ctx context.Context, _ string, port uint16) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
}

type rig struct {
	m   *Manager
	ev  *events
	srv *httptest.Server
	now time.Time
	mu  sync.Mutex
}

func (r *rig) clock() time.Time { r.mu.Lock(); defer r.mu.Unlock(); return r.now }
func (r *rig) advance(d time.Duration) {
	r.mu.Lock()
	r.now = r.now.Add(d)
	r.mu.Unlock()
}

var bearers = map[string]Principal{"tok-alice": {Name: "alice"}, "tok-bob": {Name: "bob"}, "tok-root": {Name: "root", Admin: true}}

// newRig starts a Manager behind a TLS (h2) test listener.
func newRig(t *testing.T, lim Limits, tweak ...func(*Config)) *rig {
	r := &rig{ev: &events{}, now: time.Now()}
	cfg := Config{Host: testHost, Key: []byte(strings.Repeat("k", 32)), Dial: loopDialer, Events: r.ev,
		Now: r.clock, Rate: 1000, Burst: 1000,
		Authenticate: func(tok string) (Principal, bool) { p, ok := bearers[tok]; return p, ok }}
	for _, f := range tweak {
		f(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.m = m
	hs := m.Server(nil, lim)
	r.srv = httptest.NewUnstartedServer(m)
	r.srv.Config = hs
	r.srv.EnableHTTP2 = true
	r.srv.StartTLS()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx, nil); close(done) }()
	t.Cleanup(func() { cancel(); <-done; r.srv.Close() })
	return r
}

// client sends every request to the rig's listener whatever the URL's
// host; it does not follow redirects and keeps no cookies.
func (r *rig) client() *http.Client {
	addr := r.srv.Listener.Addr().String()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (r *rig) expose(t *testing.T, port uint16, to ...string) (Preview, Links) {
	t.Helper()
	p, l, err := r.m.Create(CreateRequest{Sandbox: "sb1", Port: int(port), To: to, By: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	return p, l
}

// get sends GET u with optional header pairs.
func get(t *testing.T, c *http.Client, u string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// open exchanges a link and returns the cookie header value.
func (r *rig) open(t *testing.T, link string) string {
	t.Helper()
	resp, _ := get(t, r.client(), link)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("link answered %d, want 303", resp.StatusCode)
	}
	for _, c := range resp.Cookies() {
		if c.Name == cookieName {
			return c.Name + "=" + c.Value
		}
	}
	t.Fatalf("no %s cookie in %v", cookieName, resp.Header)
	return ""
}

func hostOf(u string) string { x, _ := url.Parse(u); return x.Host }
