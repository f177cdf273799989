package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"airlock/audit"
)

func TestUnknownSourceDenied(t *testing.T) {
	e := newEnv(t)
	c := e.dialTransparentFrom(e.worldDst(), "127.0.0.2")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: docs.example.test\r\n\r\n")
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("unknown source got a response: %q", b)
	}
	ev := e.ev.waitFor(t, "identity deny", isDeny(ruleIdentity))
	if ev.Flow == nil || !strings.HasPrefix(ev.Flow.Source, "127.0.0.2:") {
		t.Errorf("event %+v", ev.Flow)
	}
	if d := e.dials.list(); len(d) != 0 {
		t.Fatalf("dialed %v", d)
	}
}

func TestLoopToOwnListenerRefused(t *testing.T) {
	own := netip.MustParseAddrPort("198.18.0.1:3128")
	e := newEnv(t, func(c *Config) { c.Own = []netip.AddrPort{own} })
	c := e.dialTransparent(own)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET http://plain.example.test/ HTTP/1.1\r\nHost: plain.example.test\r\n\r\n")
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("loop got a response: %q", b)
	}
	e.ev.waitFor(t, "loop deny", isDeny(ruleLoop))
	if d := e.dials.list(); len(d) != 0 {
		t.Fatalf("dialed %v", d)
	}
}

func TestServerSpeaksFirstClosedWithoutDial(t *testing.T) {
	e := newEnv(t)
	c := e.dialTransparent(netip.MustParseAddrPort("127.0.0.1:25"))
	c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c) // the client waits for a banner that never comes
	if len(b) != 0 || err != nil {
		t.Fatalf("read %q, %v; want a clean close", b, err)
	}
	ev := e.ev.waitFor(t, "sniff deny", func(ev audit.Event) bool {
		return ev.Kind == audit.KindFlow && ev.Verdict == "deny" && ev.Flow.Stage == "decision"
	})
	if ev.Rule == "" {
		t.Error("deny without a rule")
	}
	if d := e.dials.list(); len(d) != 0 {
		t.Fatalf("dialed %v", d)
	}
}

func TestDialsTheCheckedAddressNotTheOriginal(t *testing.T) {
	e := newEnv(t)
	orig := netip.AddrPortFrom(netip.MustParseAddr("198.18.7.7"), e.w.tlsPort)
	c := e.transparentClient(orig, false)
	resp, err := c.Get(e.url("docs.example.test", "/"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	want := fmt.Sprintf("127.0.0.1:%d", e.w.tlsPort)
	for _, d := range e.dials.list() {
		if d != want {
			t.Fatalf("dialed %s, want only the resolved and checked %s", d, want)
		}
	}
	ev := e.ev.waitFor(t, "decision", func(ev audit.Event) bool {
		return ev.Kind == audit.KindFlow && ev.Flow.Stage == "decision" && ev.Flow.SNI == "docs.example.test"
	})
	if !ev.Flow.Mismatch || ev.Flow.OrigDst != orig.String() {
		t.Errorf("flow %+v: want the mismatch logged", ev.Flow)
	}
}

func TestNoSNIDecidedByAddress(t *testing.T) {
	// A TLS client without SNI to an address no rule names: refused with an
	// alert, nothing dialed.
	e := newEnv(t)
	c := e.dialTransparent(e.worldDst())
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake without SNI to an unnamed address succeeded")
	}
	e.ev.waitFor(t, "deny", func(ev audit.Event) bool { return ev.Kind == audit.KindFlow && ev.Verdict == "deny" })
	if d := e.dials.list(); len(d) != 0 {
		t.Fatalf("dialed %v", d)
	}
}

type fakeBindings map[netip.Addr][]string

func (b fakeBindings) NamesFor(_ string, a netip.Addr) []string { return b[a] }

func TestOpaqueDecidedByBindingName(t *testing.T) {
	dst := netip.AddrPortFrom(netip.MustParseAddr("198.18.9.9"), 0)
	e := newEnv(t, func(c *Config) { c.Bindings = fakeBindings{dst.Addr(): {"splice.example.test"}} })
	dst = netip.AddrPortFrom(dst.Addr(), e.w.tlsPort)
	raw := e.dialTransparent(dst)
	raw.SetDeadline(time.Now().Add(5 * time.Second))
	// Bytes that are neither TLS nor HTTP, to an address only a dnsd
	// binding names: spliced, because that name's category does not inspect.
	fmt.Fprintf(raw, "\x01\x02hello")
	buf := make([]byte, 1)
	raw.Read(buf)
	ev := e.ev.waitFor(t, "splice decision", func(ev audit.Event) bool {
		return ev.Kind == audit.KindFlow && ev.Flow.Stage == "decision" && ev.Flow.OrigDst == dst.String()
	})
	if ev.Verdict != "allow" || ev.Flow.Handling != "splice" || ev.Flow.Host != "splice.example.test" {
		t.Fatalf("event %+v flow %+v", ev, ev.Flow)
	}
}

func TestSpliceKeepsOriginCertificate(t *testing.T) {
	e := newEnv(t)
	c := e.dialTransparent(e.worldDst())
	tc := tls.Client(c, &tls.Config{ServerName: "splice.example.test", RootCAs: e.w.roots})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("spliced handshake against the origin's own CA: %v", err)
	}
	resp := rawExchange(t, tc, fmt.Sprintf("GET /s HTTP/1.1\r\nHost: splice.example.test:%d\r\n\r\n", e.w.tlsPort))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	tc.Close()
	ev := e.ev.waitFor(t, "close", func(ev audit.Event) bool {
		return ev.Kind == audit.KindFlow && ev.Flow.Stage == "close" && ev.Flow.Handling == "splice"
	})
	if ev.Flow.BytesUp == 0 || ev.Flow.BytesDown == 0 {
		t.Errorf("close %+v", ev.Flow)
	}
}

func TestWebhookPathsBodyAndRate(t *testing.T) {
	e := newEnv(t)
	c := e.transparentClient(e.worldDst(), false)
	post := func(path, body string, chunked bool) *http.Response {
		var r io.Reader = strings.NewReader(body)
		if chunked {
			r = io.MultiReader(strings.NewReader(body)) // unknown length: chunked
		}
		resp, err := c.Post(e.url("hooks.example.test", path), "text/plain", r)
		if err != nil {
			t.Fatal(err)
		}
		readAll(resp.Body)
		resp.Body.Close()
		return resp
	}
	if r := post("/hook/b", "x", false); r.StatusCode != http.StatusForbidden {
		t.Errorf("other path: %d", r.StatusCode)
	}
	if r := post("/hook/a", strings.Repeat("x", 2000), false); r.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("big body: %d", r.StatusCode)
	}
	if r := post("/hook/a", strings.Repeat("x", 2000), true); r.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("big chunked body: %d", r.StatusCode)
	}
	ok := 0
	for range 3 {
		if post("/hook/a", "ping", false).StatusCode == 200 {
			ok++
		}
	}
	if r := post("/hook/a", "ping", false); r.StatusCode != http.StatusTooManyRequests {
		t.Errorf("over rate: %d", r.StatusCode)
	}
	e.ev.waitFor(t, "rate deny", isDeny(ruleRate))
	for _, r := range e.w.requests() {
		if r.Path != "/hook/a" || len(r.Body) > 1024 {
			t.Errorf("origin received %s with %d bytes", r.Path, len(r.Body))
		}
	}
}

func TestAskHoldsAndTimesOutToDeny(t *testing.T) {
	e := newEnv(t)
	c := e.transparentClient(e.worldDst(), false)
	// No decision arrives: the hold expires and the request is denied.
	resp, err := c.Get(e.url("ask.example.test", "/a"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderRule) != ruleAsk {
		t.Fatalf("status %d rule %q", resp.StatusCode, resp.Header.Get(HeaderRule))
	}
	e.ev.waitFor(t, "held", func(ev audit.Event) bool { return ev.Kind == audit.KindApproval && ev.Approval.Stage == "held" })
	e.ev.waitFor(t, "expired", func(ev audit.Event) bool { return ev.Kind == audit.KindApproval && ev.Approval.Stage == "expired" })
	// Approved: the request goes through.
	e.approver = ApproverFunc(func(context.Context, Hold) (bool, error) { return true, nil })
	resp, err = c.Get(e.url("ask.example.test", "/b"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("approved request: %d", resp.StatusCode)
	}
}

func TestRegistryPackageRecognized(t *testing.T) {
	e := newEnv(t)
	c := e.transparentClient(e.worldDst(), false)
	resp, err := c.Get(e.url("registry.example.test", "/left-pad/-/left-pad-1.3.0.tgz"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	ev := e.ev.waitFor(t, "package event", func(ev audit.Event) bool {
		return ev.Kind == audit.KindHTTP && ev.HTTP.Package != nil
	})
	if p := ev.HTTP.Package; p.Ecosystem != "npm" || p.Name != "left-pad" || p.Version != "1.3.0" {
		t.Errorf("package %+v", p)
	}
	req, _ := http.NewRequest("PUT", e.url("registry.example.test", "/left-pad"), strings.NewReader("{}"))
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("publish: %d", resp.StatusCode)
	}
}

func TestExplicitPlainHTTP(t *testing.T) {
	e := newEnv(t)
	c := e.explicitClient()
	resp, err := c.Get(fmt.Sprintf("http://plain.example.test:%d/p", e.w.plainPort))
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(body, "origin GET plain.example.test") {
		t.Fatalf("status %d %q", resp.StatusCode, body)
	}
	resp, err = c.Get(fmt.Sprintf("http://denied.example.test:%d/p", e.w.plainPort))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderRule) != "default" {
		t.Fatalf("denied host: %d %q", resp.StatusCode, resp.Header.Get(HeaderRule))
	}
}

func TestDeniedTLSExplainsWith403(t *testing.T) {
	e := newEnv(t)
	c := e.transparentClient(e.worldDst(), false)
	resp, err := c.Get(e.url("denied.example.test", "/"))
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderRule) != "default" || !strings.Contains(body, "default") {
		t.Fatalf("status %d rule %q body %q", resp.StatusCode, resp.Header.Get(HeaderRule), body)
	}
	if strings.Contains(body, "127.0.0.1") {
		t.Error("refusal names an internal address")
	}
}

func TestCloseIsIdempotentAndStopsListeners(t *testing.T) {
	e := newEnv(t)
	if err := e.p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", e.explicit, time.Second)
	if err == nil {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if b, _ := io.ReadAll(c); len(b) != 0 {
			t.Fatalf("closed proxy answered %q", b)
		}
		c.Close()
	}
}

func TestNewRejectsIncompleteConfig(t *testing.T) {
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "CA") {
		t.Fatalf("err = %v", err)
	}
}

func TestWebSocketUpgradeDecidedAndLogged(t *testing.T) {
	e := newEnv(t)
	tc, err := e.tlsThroughTransparent(e.worldDst(), "docs.example.test")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(tc, "GET /ws HTTP/1.1\r\nHost: docs.example.test:%d\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", e.w.tlsPort)
	br := bufio.NewReader(tc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", resp.StatusCode)
	}
	io.WriteString(tc, "ping\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "echo: ping\n" {
		t.Fatalf("after upgrade read %q, %v", line, err)
	}
	e.ev.waitFor(t, "upgrade event", func(ev audit.Event) bool {
		return ev.Kind == audit.KindHTTP && ev.HTTP.Upgrade == "websocket" && ev.Verdict == "allow"
	})
	// The same upgrade to a path the policy refuses is refused.
	tc2, err := e.tlsThroughTransparent(e.worldDst(), "git.example.test")
	if err != nil {
		t.Fatal(err)
	}
	resp2 := rawExchange(t, tc2, fmt.Sprintf("POST /acme/app.git/git-receive-pack HTTP/1.1\r\nHost: git.example.test:%d\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", e.w.tlsPort))
	if resp2.StatusCode != http.StatusForbidden {
		t.Fatalf("refused upgrade: %d", resp2.StatusCode)
	}
}

func TestExplicitProxyCredentials(t *testing.T) {
	var e *env
	e = newEnv(t, func(c *Config) {
		c.Identify = IdentifierFunc(func(netip.Addr) (Sandbox, bool) { return Sandbox{}, false })
		c.ProxyAuth = authFunc(func(u, p string) (Sandbox, bool) {
			return Sandbox{ID: "outside", Policy: e.policy}, u == "ci" && p == "s3cret"
		})
	})
	for _, cred := range []string{"", "Basic " + b64("ci:wrong"), "Bearer x"} {
		c, err := net.Dial("tcp", e.explicit)
		if err != nil {
			t.Fatal(err)
		}
		req := fmt.Sprintf("GET http://plain.example.test:%d/ HTTP/1.1\r\nHost: plain.example.test:%d\r\n", e.w.plainPort, e.w.plainPort)
		if cred != "" {
			req += "Proxy-Authorization: " + cred + "\r\n"
		}
		resp := rawExchange(t, c, req+"\r\n")
		c.Close()
		if resp.StatusCode != http.StatusProxyAuthRequired || resp.Header.Get("Proxy-Authenticate") == "" {
			t.Fatalf("credentials %q: status %d", cred, resp.StatusCode)
		}
	}
	c, err := net.Dial("tcp", e.explicit)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp := rawExchange(t, c, fmt.Sprintf("GET http://plain.example.test:%d/ HTTP/1.1\r\nHost: plain.example.test:%d\r\nProxy-Authorization: Basic %s\r\n\r\n", e.w.plainPort, e.w.plainPort, b64("ci:s3cret")))
	if resp.StatusCode != 200 {
		t.Fatalf("with credentials: %d", resp.StatusCode)
	}
	if r := e.w.requests(); len(r) != 1 || r[0].Header.Get("Proxy-Authorization") != "" {
		t.Fatalf("origin saw %+v (proxy credentials must not be forwarded)", r)
	}
	e.ev.waitFor(t, "outside sandbox flow", func(ev audit.Event) bool { return ev.Sandbox == "outside" && ev.Kind == audit.KindHTTP })
	e.ev.waitFor(t, "identity deny", isDeny(ruleIdentity))
}

type authFunc func(string, string) (Sandbox, bool)

func (f authFunc) Authenticate(u, p string) (Sandbox, bool) { return f(u, p) }

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
