package proxy

import (
	"bufio"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elazarl/goproxy"

	"airlock/audit"
	"airlock/policies"
)

// TestRequestsFlowThroughGoproxy appends a request handler and a
// response handler to the engine's goproxy chains, after Airlock's own.
// goproxy runs request handlers in order and stops at the first that
// answers, so the appended handler must see exactly the requests the
// policy allowed — plain explicit HTTP, MITM HTTP/1.1 and MITM HTTP/2 —
// already prepared for upstream (absolute URL of the approved name, the
// injected credential), and none that were refused; the appended
// response handler must mark every response the client receives,
// refusals included.
func TestRequestsFlowThroughGoproxy(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var seen []string
	var auth []string
	e.p.engine.OnRequest().DoFunc(func(r *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.String())
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		return r, nil
	})
	e.p.engine.OnResponse().DoFunc(func(resp *http.Response, ctx *goproxy.ProxyCtx) *http.Response {
		if resp != nil {
			resp.Header.Set("X-Test-Engine", "goproxy")
		}
		return resp
	})

	get := func(c *http.Client, url string, want int) {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		readAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("GET %s: status %d, want %d", url, resp.StatusCode, want)
		}
		if resp.Header.Get("X-Test-Engine") != "goproxy" {
			t.Errorf("GET %s: the response did not pass goproxy's response handlers", url)
		}
	}
	plain := fmt.Sprintf("http://plain.example.test:%d/p", e.w.plainPort)
	get(e.explicitClient(), plain, 200)
	get(e.explicitClient(), fmt.Sprintf("http://denied.example.test:%d/p", e.w.plainPort), http.StatusForbidden)
	h1 := e.transparentClient(e.worldDst(), false)
	get(h1, e.url("docs.example.test", "/h1"), 200)
	get(h1, e.url("api.staging.example.test", "/v1/items/7"), 200)
	get(h1, e.url("docs.example.test", "/h1?x"), 200)
	get(h1, e.url("git.example.test", "/acme/app.git/info/refs?service=git-receive-pack"), http.StatusForbidden)
	h2 := e.transparentClient(e.worldDst(), true)
	get(h2, e.url("docs.example.test", "/h2"), 200)
	get(h2, e.url("git.example.test", "/acme/app.git/info/refs?service=git-receive-pack"), http.StatusForbidden)
	get(h2, e.url("docs.example.test", "/h2-second"), 200)

	mu.Lock()
	defer mu.Unlock()
	want := []string{
		"GET " + plain,
		"GET " + e.url("docs.example.test", "/h1"),
		"GET " + e.url("api.staging.example.test", "/v1/items/7"),
		"GET " + e.url("docs.example.test", "/h1?x"),
		"GET " + e.url("docs.example.test", "/h2"),
		"GET " + e.url("docs.example.test", "/h2-second"),
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("goproxy's chain saw\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	if auth[2] != "Bearer "+secretValue {
		t.Errorf("the credential was not injected before goproxy's later handlers: %q", auth[2])
	}
	if got := len(e.w.requests()); got != len(want) {
		t.Errorf("origin saw %d requests, want %d", got, len(want))
	}
}

// TestH2ConcurrentStreams: the streams of one HTTP/2 connection are
// served at once (each its own engine request) and each gets its own
// response. Run with -race, it also checks they share no mutable state.
func TestH2ConcurrentStreams(t *testing.T) {
	e := newEnv(t)
	c := e.transparentClient(e.worldDst(), true)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			path := fmt.Sprintf("/s%d", i)
			resp, err := c.Get(e.url("docs.example.test", path))
			if err != nil {
				errs <- err
				return
			}
			body := readAll(resp.Body)
			resp.Body.Close()
			if resp.ProtoMajor != 2 || resp.StatusCode != 200 || !strings.HasSuffix(body, " "+path) {
				errs <- fmt.Errorf("%s: %s %d %q", path, resp.Proto, resp.StatusCode, body)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(e.w.requests()); n != 16 {
		t.Fatalf("origin saw %d requests, want 16", n)
	}
}

// TestResponseFraming: what the HTTP/1.1 response writer sends for each
// kind of upstream response — a length, chunks with a trailer, HEAD —
// reaches the client intact, and the connection carries the next request.
func TestResponseFraming(t *testing.T) {
	e := newEnv(t)
	tc, err := e.tlsThroughTransparent(e.worldDst(), "docs.example.test")
	if err != nil {
		t.Fatal(err)
	}
	host := fmt.Sprintf("docs.example.test:%d", e.w.tlsPort)
	br := bufio.NewReader(tc)
	exchange := func(method, path string) *http.Response {
		t.Helper()
		fmt.Fprintf(tc, "%s %s HTTP/1.1\r\nHost: %s\r\n\r\n", method, path, host)
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp
	}
	resp := exchange("GET", "/stream")
	body := readAll(resp.Body)
	if body != "part one, part two" || len(resp.TransferEncoding) == 0 || resp.Trailer.Get("X-Sum") != "2 parts" {
		t.Errorf("chunked: body %q, transfer encoding %v, trailer %v", body, resp.TransferEncoding, resp.Trailer)
	}
	resp = exchange("GET", "/fixed")
	body = readAll(resp.Body)
	if want := "origin GET " + host + " /fixed"; body != want || resp.ContentLength != int64(len(want)) {
		t.Errorf("fixed: body %q, length %d", body, resp.ContentLength)
	}
	resp = exchange("HEAD", "/head")
	if readAll(resp.Body) != "" || resp.StatusCode != 200 {
		t.Errorf("HEAD: status %d", resp.StatusCode)
	}
	resp = exchange("GET", "/after-head")
	if body := readAll(resp.Body); !strings.HasSuffix(body, "/after-head") {
		t.Errorf("after HEAD: %q", body)
	}
}

// TestKeepAliveIdleTimeout: an inspected keep-alive connection that sends
// nothing after a request is closed after the idle timeout, and its
// close record says so.
func TestKeepAliveIdleTimeout(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
	tc, err := e.tlsThroughTransparent(e.worldDst(), "docs.example.test")
	if err != nil {
		t.Fatal(err)
	}
	host := fmt.Sprintf("docs.example.test:%d", e.w.tlsPort)
	for i := range 2 {
		if resp := rawExchange(t, tc, "GET /k HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := tc.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("idle connection still open: read %d, %v", n, err)
	}
	e.ev.waitFor(t, "close record with idle-timeout", func(ev audit.Event) bool {
		return ev.Kind == audit.KindFlow && ev.Flow.Stage == "close" && ev.Flow.CloseReason == "idle-timeout"
	})
}

// TestScopeTargetShortcut checks that the shortcut for a tunnel's
// canonical Host header gives what full normalization gives, and that
// every other spelling still goes through it: another host or port is
// refused, a different spelling of the same host is accepted.
func TestScopeTargetShortcut(t *testing.T) {
	for _, tc := range []struct {
		scheme, host string
		port         uint16
	}{
		{"https", "example.test", 443},
		{"https", "example.test", 8443},
		{"http", "example.test", 80},
		{"https", "2001:db8::1", 443},
	} {
		sc := &scope{scheme: tc.scheme, host: tc.host, port: tc.port}
		sc.setNames()
		if sc.exactHost == "" {
			t.Fatalf("%s %s:%d: no canonical Host", tc.scheme, tc.host, tc.port)
		}
		u := &url.URL{Path: "/"}
		h, pt, _, ok := sc.target(false, u, sc.exactHost)
		if !ok || h != tc.host || pt != tc.port {
			t.Errorf("%s: shortcut gave %q %d %v", sc.exactHost, h, pt, ok)
		}
		sc.exactHost = ""
		h2, pt2, _, ok2 := sc.target(false, u, sc.hostHead)
		if h2 != h || pt2 != pt || ok2 != ok {
			t.Errorf("%s: normalization gave %q %d %v, shortcut %q %d %v", sc.hostHead, h2, pt2, ok2, h, pt, ok)
		}
	}
	sc := &scope{scheme: "https", host: "example.test", port: 443}
	sc.setNames()
	for hostHeader, want := range map[string]bool{
		"example.test": true, "EXAMPLE.test": true, "example.test:443": true, "example.test.": true,
		"other.test": false, "example.test:8443": false, "example.test.other.test": false, "": false,
	} {
		if _, _, _, ok := sc.target(false, &url.URL{Path: "/"}, hostHeader); ok != want {
			t.Errorf("Host %q: allowed %v, want %v", hostHeader, ok, want)
		}
	}
}

// TestVerdictRuleFields checks that the request event's verdict fields
// filled with a cached rule text equal those filled from the verdict.
func TestVerdictRuleFields(t *testing.T) {
	sc := &scope{}
	for _, v := range []policies.Verdict{
		{Action: policies.ActionAllow, Rule: policies.Rule{Name: "categories.git", Pos: policies.Position{File: "p.toml", Line: 3, Col: 1}}, Category: "git"},
		{Action: policies.ActionAudit, WouldDeny: true, Rule: policies.Rule{Name: "default"}, Reason: "no rule"},
		{Action: policies.ActionAllow, Rule: policies.Rule{Name: "categories.git", Pos: policies.Position{File: "p.toml", Line: 4, Col: 1}}, Category: "git"},
	} {
		for range 2 {
			var a, b reqEvent
			a.setVerdict(v)
			b.setVerdictRule(v, sc.ruleString(v.Rule))
			if !reflect.DeepEqual(a.e, b.e) {
				t.Errorf("verdict %+v: cached fields %+v, want %+v", v, b.e, a.e)
			}
		}
	}
}
