package proxy

import (
	"bytes"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"airlock/audit"
	"airlock/policies"
)

// Request facts through the real proxy (issue 14, "Requests"): each case
// goes through the hand-built HTTP/1.1 path inside an inspected tunnel
// and through HTTP/2 (net/http's server), and must be enforced on both.

// newEnvWith is the test world with its policy edited by the replacer's
// pairs (applied to testPolicy with the world's ports filled in).
func newEnvWith(t *testing.T, pairs ...string) *env {
	t.Helper()
	sb := &swappable{}
	e := newEnv(t, func(c *Config) {
		c.Identify = IdentifierFunc(func(a netip.Addr) (Sandbox, bool) {
			if a == netip.MustParseAddr("127.0.0.1") {
				return Sandbox{ID: "sb1", Policy: sb}, true
			}
			return Sandbox{}, false
		})
	})
	src := strings.NewReplacer(pairs...).Replace(e.w.policy(testPolicy))
	pol, err := policies.Parse("facts.toml", []byte(src))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	sb.p.Store(pol)
	return e
}

// fact is one request of a test case.
type fact struct {
	method, host, path string
	header             map[string]string
	body               string
}

// sendBoth sends r through HTTP/1.1 (raw bytes in a MITM tunnel) and
// HTTP/2, and returns the two responses.
func (e *env) sendBoth(t *testing.T, r fact) map[string]*http.Response {
	t.Helper()
	out := map[string]*http.Response{}
	tc, err := e.tlsThroughTransparent(e.worldDst(), r.host)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: %d\r\n", r.method, r.path, r.host, e.w.tlsPort, len(r.body))
	for k, v := range r.header {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("Connection: close\r\n\r\n" + r.body)
	out["h1"] = rawExchange(t, tc, b.String())

	req, err := http.NewRequest(r.method, e.url(r.host, r.path), strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	resp, err := e.transparentClient(e.worldDst(), true).Do(req)
	if err != nil {
		t.Fatalf("h2 %s %s: %v", r.method, r.path, err)
	}
	if resp.ProtoMajor != 2 {
		t.Fatalf("h2 client spoke %s", resp.Proto)
	}
	body := readAll(resp.Body)
	resp.Body.Close()
	resp.Body = nopBody(body)
	out["h2"] = resp
	return out
}

func nopBody(s string) *readCloser { return &readCloser{strings.NewReader(s)} }

type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }

// expectBoth checks both responses: a refusal with status and rule, or
// (rule "") a response from the origin.
func (e *env) expectBoth(t *testing.T, r fact, status int, rule string) {
	t.Helper()
	before := len(e.w.requests())
	for proto, resp := range e.sendBoth(t, r) {
		t.Run(proto, func(t *testing.T) {
			if rule == "" {
				if resp.StatusCode != status || resp.Header.Get(HeaderRule) != "" {
					t.Errorf("%s %s: status %d rule %q, want %d from the origin", r.method, r.path, resp.StatusCode, resp.Header.Get(HeaderRule), status)
				}
				return
			}
			assertRefused(t, resp, status, rule)
		})
	}
	got := len(e.w.requests()) - before
	if rule != "" && got != 0 {
		t.Errorf("%s %s: the origin received %d refused requests", r.method, r.path, got)
	}
	if rule == "" && got != 2 {
		t.Errorf("%s %s: the origin received %d requests, want 2", r.method, r.path, got)
	}
}

const registriesBlock = "[categories.registries]\nhosts = [\"registry.example.test\"]\n"

func TestRequestPackagesBehindMirrorPrefixes(t *testing.T) {
	e := newEnvWith(t, registriesBlock, registriesBlock+"packages = { allow = [\"npm:left-pad\"] }\n")
	const h = "registry.example.test"
	e.expectBoth(t, fact{method: "GET", host: h, path: "/api/npm/npm-remote/evil-pkg"}, 403, "categories.registries.packages.allow")
	e.expectBoth(t, fact{method: "GET", host: h, path: "/repository/npm-proxy/evil-pkg/-/evil-pkg-1.0.0.tgz"}, 403, "categories.registries.packages.allow")
	e.expectBoth(t, fact{method: "GET", host: h, path: "/npm/evil-pkg"}, 403, "categories.registries.packages")
	e.expectBoth(t, fact{method: "GET", host: h, path: "/api/npm/npm-remote/left-pad/-/left-pad-1.3.0.tgz"}, 200, "")
	ev := e.ev.waitFor(t, "unrecognized path deny", func(ev audit.Event) bool {
		return ev.Kind == audit.KindHTTP && ev.Verdict == "deny" && strings.HasPrefix(ev.Rule, "categories.registries.packages ")
	})
	if !strings.Contains(ev.Reason, "not a package") {
		t.Errorf("event reason %q does not say the path is not a recognized package", ev.Reason)
	}
	ev = e.ev.waitFor(t, "allowed mirror fetch tagged", func(ev audit.Event) bool {
		return ev.Kind == audit.KindHTTP && ev.Verdict == "allow" && ev.HTTP.Package != nil
	})
	if p := ev.HTTP.Package; p.Name != "left-pad" || p.Version != "1.3.0" {
		t.Errorf("package tag %+v", p)
	}
}

func TestRequestPathForwardedInNormalForm(t *testing.T) {
	e := newEnvWith(t)
	const h = "docs.example.test"
	for _, path := range []string{
		"/a/%252e%252e/admin", "/a%00b", "/a/%C0%AE%C0%AE/admin", "/a/%EF%BC%8E%EF%BC%8E/admin", "/a/x/..", "/a/x/%2e%2e",
	} {
		e.expectBoth(t, fact{method: "GET", host: h, path: path}, 400, rulePath)
	}
	e.w.reset()
	e.expectBoth(t, fact{method: "GET", host: h, path: "/a/./b/%2e%2e/c//d/%7Euser/x%2fy/p!q"}, 200, "")
	for _, r := range e.w.requests() {
		if r.URI != "/a/c/d/~user/x%2Fy/p!q" {
			t.Errorf("origin saw %q, want the normal form /a/c/d/~user/x%%2Fy/p!q", r.URI)
		}
	}
}

func TestRequestMethodOverrides(t *testing.T) {
	e := newEnvWith(t)
	const h = "docs.example.test" // methods GET, HEAD, POST
	for _, name := range []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"} {
		e.expectBoth(t, fact{method: "POST", host: h, path: "/x", header: map[string]string{name: "DELETE"}}, 403, "categories.docs.methods")
	}
	e.expectBoth(t, fact{method: "POST", host: h, path: "/x?_method=PUT"}, 403, "categories.docs.methods")
	e.expectBoth(t, fact{method: "POST", host: h, path: "/x", header: map[string]string{"X-HTTP-Method-Override": "GET"}}, 200, "")
}

func TestRequestGitWritesClosed(t *testing.T) {
	e := newEnvWith(t, "push = false\n", "push = false\nmethods = [\"GET\", \"HEAD\", \"POST\", \"PUT\"]\n")
	const h = "git.example.test"
	lfs := map[string]string{"Content-Type": "application/vnd.git-lfs+json"}
	const batch = "/acme/app.git/info/lfs/objects/batch"
	e.expectBoth(t, fact{method: "POST", host: h, path: batch, header: lfs, body: `{"operation":"upload","objects":[{"oid":"a","size":1}]}`}, 403, "categories.git.push")
	e.expectBoth(t, fact{method: "POST", host: h, path: batch, header: lfs, body: `{"operation":"download","operation":"upload"}`}, 403, "categories.git.push")
	big := `{"operation":"download","objects":[` + strings.Repeat(`{"oid":"a","size":1},`, 4000) + `{"oid":"a","size":1}]}`
	e.expectBoth(t, fact{method: "POST", host: h, path: batch, header: lfs, body: big}, 403, "categories.git.push")
	e.expectBoth(t, fact{method: "PUT", host: h, path: "/acme/app.git/info/lfs/objects/abc", body: "object"}, 403, "categories.git.push")
	e.expectBoth(t, fact{method: "POST", host: h, path: "/acme/app.git/info/lfs/locks", body: `{"path":"a"}`}, 403, "categories.git.push")
	e.w.reset()
	down := `{"operation":"download","objects":[{"oid":"a","size":1}]}`
	e.expectBoth(t, fact{method: "POST", host: h, path: batch, header: lfs, body: down}, 200, "")
	e.expectBoth(t, fact{method: "POST", host: h, path: "/acme/app.git/git-upload-pack", body: "0000"}, 200, "")
	for _, r := range e.w.requests() {
		if strings.HasSuffix(r.Path, "/batch") && r.Body != down {
			t.Errorf("origin got the LFS batch body %q, want it whole", r.Body)
		}
	}
}

func TestRequestEmptyHostPort(t *testing.T) {
	e := newEnvWith(t)
	tc, err := e.tlsThroughTransparent(e.worldDst(), "docs.example.test")
	if err != nil {
		t.Fatal(err)
	}
	resp := rawExchange(t, tc, "GET / HTTP/1.1\r\nHost: docs.example.test:\r\n\r\n")
	assertRefused(t, resp, http.StatusBadRequest, ruleProtocol)

	c := e.dialTransparent(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), e.w.plainPort))
	resp = rawExchange(t, c, "GET / HTTP/1.1\r\nHost: plain.example.test:\r\n\r\n")
	assertRefused(t, resp, http.StatusBadRequest, ruleProtocol)

	req, _ := http.NewRequest("GET", e.url("docs.example.test", "/"), nil)
	req.Host = "docs.example.test:"
	resp, err = e.transparentClient(e.worldDst(), true).Do(req)
	if err != nil {
		t.Logf("h2 client refused to send an empty port itself: %v", err)
	} else {
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(HeaderRule) != ruleProtocol {
			t.Errorf("h2 Host with an empty port: status %d rule %q, want 400 %s", resp.StatusCode, resp.Header.Get(HeaderRule), ruleProtocol)
		}
	}
	if n := len(e.w.requests()); n != 0 {
		t.Errorf("origin received %d requests", n)
	}
}

func TestRequestDoHBlocked(t *testing.T) {
	e := newEnvWith(t, "hosts = [\"plain.example.test\"]\n", "hosts = [\"plain.example.test\"]\nallow_doh = true\n")
	const h = "docs.example.test"
	const q = "AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB"
	e.expectBoth(t, fact{method: "GET", host: h, path: "/dns-query?dns=" + q}, 403, "categories.docs.allow_doh")
	e.expectBoth(t, fact{method: "POST", host: h, path: "/dns-query", header: map[string]string{"Content-Type": "application/dns-message"}, body: "\x00\x01"}, 403, "categories.docs.allow_doh")
	e.expectBoth(t, fact{method: "GET", host: h, path: "/resolve?name=x.test", header: map[string]string{"Accept": "application/dns-json"}}, 403, "categories.docs.allow_doh")
	ev := e.ev.waitFor(t, "doh deny", isDeny("categories.docs.allow_doh"))
	if !strings.HasPrefix(ev.Reason, "doh_blocked") {
		t.Errorf("reason %q, want doh_blocked", ev.Reason)
	}
	// A category that opts in lets it through (plain http here).
	c := e.dialTransparent(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), e.w.plainPort))
	resp := rawExchange(t, c, fmt.Sprintf("GET /dns-query?dns=%s HTTP/1.1\r\nHost: plain.example.test:%d\r\n\r\n", q, e.w.plainPort))
	if resp.StatusCode != 200 || !bytes.Contains([]byte(readAll(resp.Body)), []byte("origin")) {
		t.Errorf("allow_doh category: status %d", resp.StatusCode)
	}
}

// FuzzSetPath: for every path the policy accepts, the URL the proxy
// forwards carries exactly the normal form the policy matched.
func FuzzSetPath(f *testing.F) {
	for _, s := range []string{"/a/./b/%2e%2e/c", "/x%2fy", "/@s%2Fn", "/a b", "/%7Euser", "/caf%C3%A9", "/a;b=c/d", "/a%3Bb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		norm, err := policies.NormalizePath(p)
		if err != nil {
			return
		}
		u, err := url.Parse("https://h.test/")
		if err != nil {
			t.Fatal(err)
		}
		setPath(u, norm)
		if got := u.EscapedPath(); got != norm {
			t.Fatalf("path %.80q: normal form %.80q, forwarded as %.80q", p, norm, got)
		}
	})
}
