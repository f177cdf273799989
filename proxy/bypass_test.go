package proxy

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"airlock/audit"
)

// Each test here names a bypass class and fails if the bypass works.

func TestBypassInnerHostToOtherHostInMITMTunnel(t *testing.T) {
	e := newEnv(t)
	t.Run("transparent", func(t *testing.T) {
		tc, err := e.tlsThroughTransparent(e.worldDst(), "docs.example.test")
		if err != nil {
			t.Fatal(err)
		}
		resp := rawExchange(t, tc, fmt.Sprintf("GET /x HTTP/1.1\r\nHost: git.example.test:%d\r\n\r\n", e.w.tlsPort))
		assertRefused(t, resp, http.StatusForbidden, ruleFronting)
	})
	t.Run("explicit", func(t *testing.T) {
		c, resp := e.connectTunnel(fmt.Sprintf("docs.example.test:%d", e.w.tlsPort))
		if c == nil {
			t.Fatalf("CONNECT refused: %d", resp.StatusCode)
		}
		tc := tls.Client(c, &tls.Config{ServerName: "docs.example.test", RootCAs: e.clientRoots()})
		resp = rawExchange(t, tc, fmt.Sprintf("GET /x HTTP/1.1\r\nHost: denied.example.test:%d\r\n\r\n", e.w.tlsPort))
		assertRefused(t, resp, http.StatusForbidden, ruleFronting)
	})
	if n := len(e.w.requests()); n != 0 {
		t.Fatalf("origin received %d requests", n)
	}
	e.ev.waitFor(t, "fronting deny event", isDeny(ruleFronting))
}

func TestBypassAbsoluteFormToOtherHost(t *testing.T) {
	e := newEnv(t)
	t.Run("explicit plain", func(t *testing.T) {
		c, err := net.Dial("tcp", e.explicit)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		resp := rawExchange(t, c, fmt.Sprintf("GET http://plain.example.test:%d/ HTTP/1.1\r\nHost: denied.example.test\r\n\r\n", e.w.plainPort))
		assertRefused(t, resp, http.StatusForbidden, ruleFronting)
	})
	t.Run("inside MITM tunnel", func(t *testing.T) {
		tc, err := e.tlsThroughTransparent(e.worldDst(), "docs.example.test")
		if err != nil {
			t.Fatal(err)
		}
		resp := rawExchange(t, tc, fmt.Sprintf("GET https://denied.example.test:%d/ HTTP/1.1\r\nHost: denied.example.test:%d\r\n\r\n", e.w.tlsPort, e.w.tlsPort))
		assertRefused(t, resp, http.StatusForbidden, ruleFronting)
	})
	t.Run("https URL to plain proxy", func(t *testing.T) {
		c, err := net.Dial("tcp", e.explicit)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		resp := rawExchange(t, c, fmt.Sprintf("GET https://docs.example.test:%d/ HTTP/1.1\r\nHost: docs.example.test:%d\r\n\r\n", e.w.tlsPort, e.w.tlsPort))
		assertRefused(t, resp, http.StatusBadRequest, ruleProtocol)
	})
	if n := len(e.w.requests()); n != 0 {
		t.Fatalf("origin received %d requests", n)
	}
}

func TestBypassSNIAuthorityMismatch(t *testing.T) {
	e := newEnv(t)
	c, resp := e.connectTunnel(fmt.Sprintf("docs.example.test:%d", e.w.tlsPort))
	if c == nil {
		t.Fatalf("CONNECT refused: %d", resp.StatusCode)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "git.example.test", RootCAs: e.clientRoots()})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Fatal("TLS handshake with an SNI other than the CONNECT authority succeeded")
	}
	e.ev.waitFor(t, "fronting deny", isDeny(ruleFronting))
	if n := len(e.dials.list()); n != 0 {
		t.Fatalf("proxy dialed upstream %d times", n)
	}
}

func TestBypassIPLiteralConnect(t *testing.T) {
	e := newEnv(t)
	for _, auth := range []string{
		fmt.Sprintf("127.0.0.1:%d", e.w.tlsPort),
		fmt.Sprintf("[::ffff:127.0.0.1]:%d", e.w.tlsPort),
		fmt.Sprintf("2130706433:%d", e.w.tlsPort),
	} {
		c, resp := e.connectTunnel(auth)
		if c != nil {
			t.Fatalf("CONNECT %s was accepted", auth)
		}
		if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusBadRequest {
			t.Errorf("CONNECT %s: status %d", auth, resp.StatusCode)
		}
		if resp.Header.Get(HeaderRule) == "" {
			t.Errorf("CONNECT %s: refusal names no rule", auth)
		}
	}
	if n := len(e.dials.list()); n != 0 {
		t.Fatalf("proxy dialed upstream %d times", n)
	}
}

func TestBypassDisallowedPort(t *testing.T) {
	e := newEnv(t)
	c, resp := e.connectTunnel("docs.example.test:22")
	if c != nil {
		t.Fatal("CONNECT to a port the category does not allow was accepted")
	}
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("status %d", resp.StatusCode)
	}
	// Transparent: SNI of an allowed host, but a port no category allows.
	// The proxy explains the refusal over TLS with its CA.
	tc, err := e.tlsThroughTransparent(netip.MustParseAddrPort("127.0.0.1:8443"), "docs.example.test")
	if err != nil {
		t.Fatal(err)
	}
	resp = rawExchange(t, tc, "GET / HTTP/1.1\r\nHost: docs.example.test:8443\r\n\r\n")
	if resp.StatusCode != http.StatusForbidden || !strings.HasPrefix(resp.Header.Get(HeaderRule), "categories.docs.ports") {
		t.Errorf("status %d rule %q", resp.StatusCode, resp.Header.Get(HeaderRule))
	}
	if n := len(e.dials.list()); n != 0 {
		t.Fatalf("proxy dialed upstream: %v", e.dials.list())
	}
}

func TestBypassRebindingToNonPublicAddress(t *testing.T) {
	e := newEnv(t)
	for _, name := range []string{"rebind.example.test", "meta.example.test", "mapped.example.test", "own.example.test"} {
		t.Run(name, func(t *testing.T) {
			c := e.transparentClient(e.worldDst(), false)
			resp, err := c.Get(e.url(name, "/"))
			if err == nil {
				body := readAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusForbidden {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
			}
			c2, resp2 := e.connectTunnel(fmt.Sprintf("%s:%d", name, e.w.tlsPort))
			if c2 != nil {
				t.Fatal("CONNECT to a name resolving to a refused address was accepted")
			}
			if resp2.StatusCode != http.StatusForbidden {
				t.Errorf("CONNECT status %d", resp2.StatusCode)
			}
		})
	}
	if d := e.dials.list(); len(d) != 0 {
		t.Fatalf("proxy dialed %v", d)
	}
	e.ev.waitFor(t, "address deny", isDeny(ruleAddress))
}

func TestBypassSmugglingFraming(t *testing.T) {
	e := newEnv(t)
	smuggled := "GET /smuggled HTTP/1.1\r\nHost: plain.example.test\r\n\r\n"
	cases := map[string]string{
		"CL and TE":          "POST /a HTTP/1.1\r\nHost: H\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled,
		"TE and CL":          "POST /a HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\nContent-Length: 60\r\n\r\n0\r\n\r\n" + smuggled,
		"duplicate CL equal": "POST /a HTTP/1.1\r\nHost: H\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
		"duplicate CL":       "POST /a HTTP/1.1\r\nHost: H\r\nContent-Length: 0\r\nContent-Length: 60\r\n\r\n" + smuggled,
		"CL list":            "POST /a HTTP/1.1\r\nHost: H\r\nContent-Length: 3, 3\r\n\r\nabc",
		"CL sign":            "POST /a HTTP/1.1\r\nHost: H\r\nContent-Length: +3\r\n\r\nabc",
		"TE identity":        "POST /a HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: identity\r\n\r\n" + smuggled,
		"TE chunked twice":   "POST /a HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"TE list":            "POST /a HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		"TE obs-fold":        "POST /a HTTP/1.1\r\nHost: H\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n",
		"obs-fold":           "GET /a HTTP/1.1\r\nHost: H\r\nX-A: b\r\n c\r\n\r\n",
		"space before colon": "POST /a HTTP/1.1\r\nHost: H\r\nContent-Length : 60\r\n\r\n" + smuggled,
		"bare LF":            "GET /a HTTP/1.1\nHost: H\n\n",
		"duplicate Host":     "GET /a HTTP/1.1\r\nHost: H\r\nHost: denied.example.test\r\n\r\n",
		"no Host":            "GET /a HTTP/1.1\r\n\r\n",
		"bad chunk size":     "POST /a HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n" + smuggled,
		"chunk overflow":     "POST /a HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nabc\r\n0\r\n\r\n" + smuggled,
		"chunk without CRLF": "POST /a HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX0\r\n\r\n" + smuggled,
		"NUL in header":      "GET /a HTTP/1.1\r\nHost: H\r\nX-A: a\x00b\r\n\r\n",
		"HTTP/0.9":           "GET /a\r\n\r\n",
	}
	host := fmt.Sprintf("plain.example.test:%d", e.w.plainPort)
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			raw := strings.ReplaceAll(raw, "Host: H\r", "Host: "+host+"\r")
			raw = strings.ReplaceAll(raw, "Host: H\n", "Host: "+host+"\n")
			c := e.dialTransparent(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), e.w.plainPort))
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write([]byte(raw)); err != nil {
				t.Fatal(err)
			}
			got := readAll(c)
			if strings.Contains(got, "origin ") {
				t.Fatalf("a request was forwarded:\n%s", got)
			}
			if !strings.HasPrefix(got, "HTTP/1.1 400") {
				t.Fatalf("want 400, got:\n%s", got)
			}
		})
	}
	for _, r := range e.w.requests() {
		t.Errorf("origin received %s %s", r.Method, r.Path)
	}
	e.ev.waitFor(t, "framing deny", isDeny(ruleFraming))
}

func TestBypassGitPushSpellings(t *testing.T) {
	e := newEnv(t)
	c := e.transparentClient(e.worldDst(), false)
	spellings := []struct{ method, path string }{
		{"POST", "/acme/app.git/git-receive-pack"},
		{"POST", "/acme/app.git/GIT-RECEIVE-PACK"},
		{"POST", "/acme/app.git/git-%72eceive-pack"},
		{"POST", "/acme/app.git/git%2Dreceive%2Dpack"},
		{"POST", "//acme//app.git//git-receive-pack"},
		{"POST", "/acme/./app.git/./git-receive-pack"},
		{"POST", "/acme/x/../app.git/git-receive-pack"},
		{"POST", "/acme/app.git/git-receive-pack/"},
		{"GET", "/acme/app.git/info/refs?service=git-receive-pack"},
		{"GET", "/acme/app.git/info/refs?service=GIT-RECEIVE-PACK"},
		{"GET", "/acme/app.git/info/refs?service=git%2Dreceive-pack"},
		{"GET", "/acme/app.git/info/refs?service=git-upload-pack&service=git-receive-pack"},
		{"GET", "/acme/app.git/INFO/REFS?service=git-receive-pack"},
	}
	for _, s := range spellings {
		req, _ := http.NewRequest(s.method, e.url("git.example.test", ""), strings.NewReader("0000"))
		req.URL.Opaque = ""
		req.URL.RawPath = ""
		path, query, _ := strings.Cut(s.path, "?")
		req.URL.Path = path
		req.URL.RawPath = path
		req.URL.RawQuery = query
		// Send the path exactly as spelled.
		req.URL.Opaque = "//" + req.URL.Host + path
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", s.method, s.path, err)
		}
		body := readAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s %s: status %d %q", s.method, s.path, resp.StatusCode, body)
		}
	}
	for _, r := range e.w.requests() {
		t.Errorf("origin received %s %s?%s", r.Method, r.Path, r.Query)
	}
	resp, err := c.Get(e.url("git.example.test", "/acme/app.git/info/refs?service=git-upload-pack"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("fetch refused: %d", resp.StatusCode)
	}
}

func TestBypassStripInjectedCredential(t *testing.T) {
	e := newEnv(t)
	host := fmt.Sprintf("api.staging.example.test:%d", e.w.tlsPort)
	for i, tr := range []struct {
		raw    string
		status int
	}{
		// Connection naming the injected header is refused, not obeyed.
		{"GET /v1/items/1 HTTP/1.1\r\nHost: " + host + "\r\nConnection: Authorization\r\n\r\n", http.StatusBadRequest},
		{"GET /v1/items/2 HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer client-chosen\r\nConnection: keep-alive, authorization\r\n\r\n", http.StatusBadRequest},
		{"GET /v1/items/3 HTTP/1.1\r\nHost: " + host + "\r\nauthorization: Basic x\r\nAuthorization: Bearer y\r\n\r\n", 200},
	} {
		tc, err := e.tlsThroughTransparent(e.worldDst(), "api.staging.example.test")
		if err != nil {
			t.Fatal(err)
		}
		resp := rawExchange(t, tc, tr.raw)
		if resp.StatusCode != tr.status {
			t.Fatalf("request %d: status %d, want %d", i, resp.StatusCode, tr.status)
		}
	}
	reqs := e.w.requests()
	if len(reqs) != 1 {
		t.Fatalf("origin saw %d requests, want 1", len(reqs))
	}
	for _, r := range reqs {
		if got := r.Header.Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+secretValue {
			t.Errorf("%s: Authorization upstream = %q, want only the injected credential", r.Path, got)
		}
	}
	ev := e.ev.waitFor(t, "http event with injection", func(ev audit.Event) bool {
		return ev.Kind == audit.KindHTTP && len(ev.HTTP.Injected) > 0
	})
	if ev.HTTP.Injected[0] != "staging-token" {
		t.Errorf("injected = %v", ev.HTTP.Injected)
	}
	if strings.Contains(e.ev.dump(), secretValue) {
		t.Fatal("an event carries the secret value")
	}
}

func TestBypassSentinelToWrongHost(t *testing.T) {
	e := newEnv(t)
	c := e.transparentClient(e.worldDst(), false)
	// To the secret's own host: swapped for the real value.
	req, _ := http.NewRequest("GET", e.url("api.staging.example.test", "/v1/items/9"), nil)
	req.Header.Set("X-Token", placeholder)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if r := e.w.requests(); len(r) != 1 || r[0].XToken != secretValue {
		t.Fatalf("placeholder not swapped toward its own host: %+v", r)
	}
	e.w.reset()
	// Anywhere else: blocked, logged as secret egress, never forwarded.
	for _, where := range []string{"header", "query", "body"} {
		u := e.url("docs.example.test", "/leak")
		if where == "query" {
			u += "?t=" + placeholder
		}
		method, body := "GET", ""
		if where == "body" {
			method, body = "POST", `{"token":"`+placeholder+`"}`
		}
		req, _ := http.NewRequest(method, u, strings.NewReader(body))
		if where == "header" {
			req.Header.Set("X-Token", "prefix "+placeholder)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderRule) != ruleSentinel {
			t.Fatalf("%s: status %d rule %q", where, resp.StatusCode, resp.Header.Get(HeaderRule))
		}
	}
	if r := e.w.requests(); len(r) != 0 {
		t.Fatalf("placeholder reached the wrong host: %+v", r)
	}
	ev := e.ev.waitFor(t, "secret egress event", func(ev audit.Event) bool {
		return ev.Kind == audit.KindHTTP && ev.HTTP.Secret == "staging-token" && ev.Rule == ruleSentinel
	})
	if ev.Verdict != "deny" {
		t.Errorf("verdict %q", ev.Verdict)
	}
	if strings.Contains(e.ev.dump(), secretValue) {
		t.Fatal("an event carries the secret value")
	}
}

func TestBypassUpstreamCertificateFailure(t *testing.T) {
	e := newEnv(t)
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), e.w.badPort)
	c := e.transparentClient(dst, false)
	resp, err := c.Get(fmt.Sprintf("https://bad.example.test:%d/", e.w.badPort))
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "certificate") {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if resp.Header.Get(HeaderRule) != ruleUpstream {
		t.Errorf("rule %q", resp.Header.Get(HeaderRule))
	}
	e.ev.waitFor(t, "upstream deny", isDeny(ruleUpstream))
	if strings.Contains(body, "127.0.0.1") {
		t.Error("refusal reveals an internal address")
	}
}

func TestBypassTRACE(t *testing.T) {
	e := newEnv(t)
	tc, err := e.tlsThroughTransparent(e.worldDst(), "docs.example.test")
	if err != nil {
		t.Fatal(err)
	}
	resp := rawExchange(t, tc, fmt.Sprintf("TRACE / HTTP/1.1\r\nHost: docs.example.test:%d\r\n\r\n", e.w.tlsPort))
	assertRefused(t, resp, http.StatusForbidden, ruleTrace)
}

func assertRefused(t *testing.T, resp *http.Response, status int, rule string) {
	t.Helper()
	body := readAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, body)
	}
	if resp.Header.Get(HeaderRule) != rule {
		t.Errorf("rule header %q, want %q", resp.Header.Get(HeaderRule), rule)
	}
	if resp.Header.Get(HeaderRequestID) == "" || !strings.Contains(body, rule) {
		t.Errorf("refusal lacks request id or rule: %q", body)
	}
}
