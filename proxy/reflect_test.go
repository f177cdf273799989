package proxy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"airlock/audit"
	"airlock/policies"
)

// The reflection world: an internal API whose responses echo what they
// were sent (headers, body), reached with an injected credential and a
// sentinel, beside a body-sentinel host and a host with neither.

const (
	apiSecret   = "api-secret-0123456789"
	signSecret  = `sig/<&>key+value 42` // escapes differently in JSON and URLs
	signPH      = "airlock-placeholder-sign0123"
	apiRedacted = "airlock-redacted-api-token"
)

const reflectPolicy = `version = 1

[categories.api]
kind = "internal_api"
hosts = ["api.staging.example.test"]
ports = [TLSPORT, H1PORT]
routes = [{ methods = ["GET", "POST"], path = "/**" }]
inject = { header = "Authorization", secret = "api-token", format = "Bearer {}" }
sentinels = ["sign-key"]
sentinel_headers = ["X-Sign"]

[categories.hooks]
kind = "public_web"
hosts = ["hooks.example.test"]
ports = [TLSPORT]
methods = ["POST"]
sentinels = ["sign-key"]
sentinel_headers = []
sentinel_body = true

[categories.docs]
kind = "public_web"
hosts = ["docs.example.test"]
ports = [TLSPORT, H1PORT]
methods = ["GET", "POST"]

[categories.plainapi]
kind = "public_web"
hosts = ["plain.example.test"]
http = true
ports = [PLAINPORT]
methods = ["GET"]
inject = { header = "X-Api-Key", secret = "api-token" }
`

type reflectSecrets struct{}

func (reflectSecrets) Lookup(_, name string) (string, bool) {
	switch name {
	case "api-token":
		return apiSecret, true
	case "sign-key":
		return signSecret, true
	}
	return "", false
}

func (reflectSecrets) Placeholders(string) []Placeholder {
	return []Placeholder{{Name: "sign-key", Value: signPH}}
}

func newReflectEnv(t *testing.T) *env {
	t.Helper()
	var pol atomic.Pointer[policies.Bound]
	e := newEnv(t, func(c *Config) {
		c.Secrets = reflectSecrets{}
		c.Identify = IdentifierFunc(func(a netip.Addr) (Sandbox, bool) {
			p := pol.Load()
			return Sandbox{ID: "sb1", Policy: p}, p != nil && a == netip.MustParseAddr("127.0.0.1")
		})
	})
	p, err := policies.Parse("reflect.toml", []byte(e.w.policy(reflectPolicy)))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	pol.Store(policies.Bind(p, worldOperator))
	return e
}

// echoBack answers /echo/MODE with what the request carried: every
// header field as "Name: value" lines (and the body), in the mode's
// framing and coding. Written in small flushed pieces, so that a value
// arrives at the proxy split across reads.
func echoBack(rw http.ResponseWriter, r *http.Request, body []byte) {
	var dump bytes.Buffer
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range r.Header[k] {
			fmt.Fprintf(&dump, "%s: %s\n", k, v)
		}
	}
	dump.Write(body)
	h := rw.Header()
	mode := strings.TrimPrefix(r.URL.Path, "/echo/")
	out := dump.Bytes()
	switch mode {
	case "headers":
		for i, k := range keys {
			h.Set(fmt.Sprintf("X-Echo-%d", i), k+": "+strings.Join(r.Header[k], ", "))
		}
		out = []byte("ok")
	case "json":
		out, _ = json.Marshal(map[string]any{"headers": r.Header, "body": string(body), "query": r.URL.Query()})
		h.Set("Content-Type", "application/json")
	case "phpjson":
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.Encode(r.Header)
		out = bytes.ReplaceAll(b.Bytes(), []byte("/"), []byte(`\/`))
	case "cl":
		h.Set("Content-Length", fmt.Sprint(len(out)))
	case "gzip", "badgzip":
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(out)
		zw.Close()
		out = z.Bytes()
		if mode == "badgzip" {
			out[len(out)-6] ^= 0xff // the CRC: the body decodes, then fails its check
		}
		h.Set("Content-Encoding", "gzip")
	case "deflate":
		var z bytes.Buffer
		zw := zlib.NewWriter(&z)
		zw.Write(out)
		zw.Close()
		out = z.Bytes()
		h.Set("Content-Encoding", "deflate")
	case "br":
		h.Set("Content-Encoding", "br") // not really: the proxy must not deliver it anyway
	case "trailername", "latetrailername":
		// The credential as a trailer's name: announced in the head, or
		// sent only at the end.
		name := "X-" + strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if mode == "trailername" {
			h.Set("Trailer", name)
		} else {
			name = http.TrailerPrefix + name
		}
		defer func() { h.Set(name, "1") }()
		out = []byte("ok")
	case "trailer":
		h.Set("Trailer", "X-Echo")
		defer func() { h.Set("X-Echo", r.Header.Get("Authorization")) }()
		out = []byte("ok")
	}
	rw.WriteHeader(http.StatusOK)
	for len(out) > 0 {
		n := min(len(out), 5)
		rw.Write(out[:n])
		http.NewResponseController(rw).Flush()
		out = out[n:]
	}
}

// leaked reports whether s holds a secret in any form a server echoes.
func leaked(s string) string {
	for _, v := range []string{apiSecret, signSecret} {
		js, _ := json.Marshal(v)
		plain := strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(string(js[1 : len(js)-1]))
		forms := []string{v, string(js[1 : len(js)-1]), plain, strings.ReplaceAll(plain, "/", `\/`), url.QueryEscape(v), url.PathEscape(v)}
		for _, f := range forms {
			if strings.Contains(s, f) {
				return f
			}
		}
	}
	return ""
}

// received is everything a response gave the client: head, body, trailers.
func received(t *testing.T, resp *http.Response) (string, error) {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	var all strings.Builder
	resp.Header.Write(&all)
	all.Write(b)
	resp.Trailer.Write(&all)
	return all.String(), err
}

type reflectClient struct {
	name string
	c    *http.Client
}

func (e *env) reflectClients() []reflectClient {
	h1 := e.transparentClient(e.worldDst(), false)
	h1.Transport.(*http.Transport).DisableCompression = true
	h2 := e.transparentClient(e.worldDst(), true)
	h2.Transport.(*http.Transport).DisableCompression = true
	return []reflectClient{{"h1", h1}, {"h2", h2}}
}

func reflectedEvent(e *env, t *testing.T, secret, pos string) audit.Event {
	t.Helper()
	return e.ev.waitFor(t, "secret_reflected "+secret+" at "+pos, func(ev audit.Event) bool {
		r := ev.SecretReflected
		return ev.Kind == audit.KindSecretReflected && r != nil && r.Secret == secret && strings.HasPrefix(r.Position, pos)
	})
}

// TestReflectInjectedCredential: an API that echoes what it was sent
// never gives the sandbox the credential the proxy injected — in a header
// field, in a body (identity with and without a length, gzip, deflate,
// split across reads), or in a trailer — over HTTP/1.1 (the direct
// upstream path for GET, net/http's for POST) and HTTP/2; the sandbox
// gets the placeholder and each reflection is an event.
func TestReflectInjectedCredential(t *testing.T) {
	e := newReflectEnv(t)
	cases := []struct{ mode, pos string }{
		{"headers", "header:X-Echo-"}, {"body", "body"}, {"cl", "body"}, {"gzip", "body"},
		{"deflate", "body"}, {"json", "body"}, {"trailer", "trailer:X-Echo"},
	}
	for _, cl := range e.reflectClients() {
		for _, method := range []string{"GET", "POST"} {
			for _, tc := range cases {
				name := cl.name + " " + method + " " + tc.mode
				var body io.Reader
				if method == "POST" {
					body = strings.NewReader("payload")
				}
				req, _ := http.NewRequest(method, e.url("api.staging.example.test", "/echo/"+tc.mode), body)
				req.Header.Set("Accept-Encoding", "br, gzip")
				resp, err := cl.c.Do(req)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				got, err := received(t, resp)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("%s: status %d, %v", name, resp.StatusCode, err)
				}
				if f := leaked(got); f != "" {
					t.Fatalf("%s: the sandbox received the secret (%q):\n%s", name, f, got)
				}
				if !strings.Contains(got, apiRedacted) {
					t.Fatalf("%s: no placeholder where the secret was:\n%s", name, got)
				}
				if resp.Header.Get("Content-Encoding") != "" {
					t.Fatalf("%s: delivered with Content-Encoding %q, want decoded", name, resp.Header.Get("Content-Encoding"))
				}
				if tc.mode == "body" && strings.Contains(got, "Accept-Encoding: br") {
					t.Fatalf("%s: the upstream was offered a coding the proxy cannot scan:\n%s", name, got)
				}
				ev := reflectedEvent(e, t, "api-token", tc.pos)
				if r := ev.SecretReflected; r.Host != "api.staging.example.test" || r.Action != "replaced" || r.Count < 1 || ev.Rule != ruleReflect {
					t.Fatalf("%s: event %+v %+v", name, ev, r)
				}
				if tc.pos == "body" && ev.SecretReflected.Offset == 0 {
					t.Fatalf("%s: body offset 0", name)
				}
				e.ev.mu.Lock()
				e.ev.events = nil
				e.ev.mu.Unlock()
			}
		}
	}
	if f := leaked(e.ev.dump()); f != "" {
		t.Fatalf("an event carries the secret (%q)", f)
	}
}

// TestReflectPlainHTTP: the same holds for plain HTTP through the
// explicit proxy.
func TestReflectPlainHTTP(t *testing.T) {
	e := newReflectEnv(t)
	c := e.explicitClient()
	c.Transport.(*http.Transport).DisableCompression = true
	for _, mode := range []string{"headers", "cl", "gzip"} {
		resp, err := c.Get(fmt.Sprintf("http://plain.example.test:%d/echo/%s", e.w.plainPort, mode))
		if err != nil {
			t.Fatal(err)
		}
		got, err := received(t, resp)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: status %d, %v", mode, resp.StatusCode, err)
		}
		if f := leaked(got); f != "" || !strings.Contains(got, apiRedacted) {
			t.Fatalf("%s: secret %q delivered, or no placeholder:\n%s", mode, f, got)
		}
		reflectedEvent(e, t, "api-token", map[string]string{"headers": "header:", "cl": "body", "gzip": "body"}[mode])
	}
}

// TestReflectSentinelSwapped: a placeholder the proxy swapped for the
// real value comes back as the placeholder, in every escaped form.
func TestReflectSentinelSwapped(t *testing.T) {
	e := newReflectEnv(t)
	for _, cl := range e.reflectClients() {
		for _, mode := range []string{"json", "phpjson", "headers", "gzip"} {
			req, _ := http.NewRequest("GET", e.url("api.staging.example.test", "/echo/"+mode), nil)
			req.Header.Set("X-Sign", "sig="+signPH)
			resp, err := cl.c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := received(t, resp)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%s %s: status %d, %v", cl.name, mode, resp.StatusCode, err)
			}
			if f := leaked(got); f != "" {
				t.Fatalf("%s %s: the sandbox received the secret (%q):\n%s", cl.name, mode, f, got)
			}
			if !strings.Contains(got, signPH) {
				t.Fatalf("%s %s: no placeholder:\n%s", cl.name, mode, got)
			}
			reflectedEvent(e, t, "sign-key", map[string]string{"json": "body", "phpjson": "body", "headers": "header:", "gzip": "body"}[mode])
		}
	}
	reqs := e.w.requests()
	if len(reqs) == 0 || reqs[0].Header.Get("X-Sign") != "sig="+signSecret {
		t.Fatalf("the placeholder was not swapped upstream: %+v", reqs)
	}
}

// TestReflectRefusesUnscannable: a content coding the proxy cannot undo
// is refused (502) on a request it injected into, and logged; the same
// response without injection is delivered as is. (A protocol switch is
// refused before the request leaves: TestInjectRefusesUpgrade.)
func TestReflectRefusesUnscannable(t *testing.T) {
	e := newReflectEnv(t)
	for _, cl := range e.reflectClients() {
		resp, err := cl.c.Get(e.url("api.staging.example.test", "/echo/br"))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := received(t, resp)
		if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(HeaderRule) != ruleReflect {
			t.Fatalf("%s br: status %d rule %q", cl.name, resp.StatusCode, resp.Header.Get(HeaderRule))
		}
		if f := leaked(got); f != "" {
			t.Fatalf("%s br: the refusal carries the secret", cl.name)
		}
		if ev := reflectedEvent(e, t, "api-token", "body"); ev.SecretReflected.Action != "refused" || ev.Verdict != "deny" {
			t.Fatalf("%s br: event %+v", cl.name, ev.SecretReflected)
		}
		// Without injection, nothing is scanned or changed.
		resp, err = cl.c.Get(e.url("docs.example.test", "/echo/br"))
		if err != nil {
			t.Fatal(err)
		}
		received(t, resp)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "br" {
			t.Fatalf("%s br without injection: status %d coding %q", cl.name, resp.StatusCode, resp.Header.Get("Content-Encoding"))
		}
	}
}

// TestReflectPlainPathUnchanged: a response to a request without
// injection keeps its length and coding (it is not scanned).
func TestReflectPlainPathUnchanged(t *testing.T) {
	e := newReflectEnv(t)
	for _, cl := range e.reflectClients() {
		for _, mode := range []string{"cl", "gzip"} {
			resp, err := cl.c.Get(e.url("docs.example.test", "/echo/"+mode))
			if err != nil {
				t.Fatal(err)
			}
			received(t, resp)
			if mode == "cl" && resp.ContentLength <= 0 || mode == "gzip" && resp.Header.Get("Content-Encoding") != "gzip" {
				t.Fatalf("%s %s: length %d coding %q", cl.name, mode, resp.ContentLength, resp.Header.Get("Content-Encoding"))
			}
		}
	}
	for _, ev := range e.ev.all() {
		if ev.Kind == audit.KindSecretReflected {
			t.Fatalf("a response without injection was scanned: %+v", ev)
		}
	}
}

// TestReflectCutBodyAborts: a body that fails to decode after the head
// was sent is cut off: the client sees a broken response, not a short
// one that looks complete.
func TestReflectCutBodyAborts(t *testing.T) {
	e := newReflectEnv(t)
	for _, cl := range e.reflectClients() {
		resp, err := cl.c.Get(e.url("api.staging.example.test", "/echo/badgzip"))
		if err != nil {
			continue // refused before the head: also not delivered
		}
		got, err := received(t, resp)
		if err == nil {
			t.Fatalf("%s: a body that failed its checksum was delivered as complete:\n%s", cl.name, got)
		}
		if f := leaked(got); f != "" {
			t.Fatalf("%s: the sandbox received the secret (%q)", cl.name, f)
		}
	}
}

// TestInjectRefusesUpgrade: a request the proxy would put a secret into
// that asks to switch protocols — a WebSocket or h2c upgrade, inside an
// inspected tunnel or as a plain explicit proxy request — is refused with
// 403 (proxy.inject) before it leaves: the upstream never sees it, and the
// refusal says why. Without injection the WebSocket upgrade still passes.
func TestInjectRefusesUpgrade(t *testing.T) {
	e := newReflectEnv(t)
	ws := "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	h2c := "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
	for _, tc := range []struct{ name, host, up, want string }{
		{"websocket", "api.staging.example.test", ws, "websocket"},
		{"h2c", "api.staging.example.test", h2c, "h2c"},
		{"plain websocket", "plain.example.test", ws, "websocket"},
	} {
		e.w.reset()
		var resp *http.Response
		if tc.host == "plain.example.test" {
			u := fmt.Sprintf("http://%s:%d/ws", tc.host, e.w.plainPort)
			resp = rawExchange(t, dialExplicit(t, e), fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s:%d\r\n", u, tc.host, e.w.plainPort)+tc.up)
		} else {
			c, err := e.tlsThroughTransparent(e.worldDst(), tc.host)
			if err != nil {
				t.Fatal(err)
			}
			resp = rawExchange(t, c, fmt.Sprintf("GET /ws HTTP/1.1\r\nHost: %s:%d\r\n", tc.host, e.w.tlsPort)+tc.up)
			c.Close()
		}
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderRule) != ruleInject {
			t.Fatalf("%s: status %d rule %q", tc.name, resp.StatusCode, resp.Header.Get(HeaderRule))
		}
		if n := len(e.w.requests()); n != 0 {
			t.Fatalf("%s: the upstream saw %d requests", tc.name, n)
		}
		e.ev.waitFor(t, tc.name+" refusal", func(ev audit.Event) bool {
			return ev.Kind == audit.KindHTTP && ev.Rule == ruleInject && ev.HTTP.Upgrade == tc.want &&
				strings.Contains(ev.Reason, "may not switch protocols")
		})
	}
	c, err := e.tlsThroughTransparent(e.worldDst(), "docs.example.test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if resp := rawExchange(t, c, fmt.Sprintf("GET /ws HTTP/1.1\r\nHost: docs.example.test:%d\r\n", e.w.tlsPort)+ws); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("websocket without injection: status %d", resp.StatusCode)
	}
}

// TestReflectTrailerName: an upstream that sends the injected credential
// as a trailer's name — announced in the head or only at the end — never
// gives it to the sandbox, over HTTP/2 and HTTP/1.1: an announced one is
// refused with the head (502), a late one is removed, and both are events.
func TestReflectTrailerName(t *testing.T) {
	e := newReflectEnv(t)
	for _, cl := range e.reflectClients() {
		// GET takes the direct upstream path, which keeps only announced
		// trailers; POST takes net/http's, which keeps late ones too.
		for _, mode := range []string{"GET trailername", "POST trailername", "POST latetrailername"} {
			name := cl.name + " " + mode
			method, mode, _ := strings.Cut(mode, " ")
			req, _ := http.NewRequest(method, e.url("api.staging.example.test", "/echo/"+mode), strings.NewReader("x"))
			resp, err := cl.c.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got, _ := received(t, resp)
			if f := leaked(got); f != "" {
				t.Fatalf("%s: the sandbox received the secret (%q):\n%s", name, f, got)
			}
			for k := range resp.Trailer {
				if strings.Contains(strings.ToLower(k), strings.ToLower(apiSecret)) {
					t.Fatalf("%s: trailer %q delivered", name, k)
				}
			}
			ev := reflectedEvent(e, t, "api-token", "trailer name")
			if mode == "trailername" && (resp.StatusCode != http.StatusBadGateway || ev.SecretReflected.Action != "refused") {
				t.Fatalf("%s: status %d, event %+v", name, resp.StatusCode, ev.SecretReflected)
			}
			if mode == "latetrailername" && ev.SecretReflected.Action != "removed" {
				t.Fatalf("%s: event %+v", name, ev.SecretReflected)
			}
			e.ev.mu.Lock()
			e.ev.events = nil
			e.ev.mu.Unlock()
		}
	}
}
