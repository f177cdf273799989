package proxy

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"airlock/audit"
)

// TestSentinelOnlyWhereConfigured: a placeholder is swapped only in the
// positions its category names (api: header X-Sign; hooks: the body). In
// any other position — the URL query or path, another header, Cookie,
// the injected header, a body without sentinel_body — the request is
// refused with 403 and logged as secret egress, like a placeholder sent
// to another host, over HTTP/1.1 and HTTP/2; the upstream sees nothing.
func TestSentinelOnlyWhereConfigured(t *testing.T) {
	e := newReflectEnv(t)
	type attempt struct {
		name, host, path, method, body string
		header                         [2]string
		want                           int
	}
	attempts := []attempt{
		{"configured header", "api.staging.example.test", "/v1/x", "GET", "", [2]string{"X-Sign", signPH}, 200},
		{"configured body", "hooks.example.test", "/hook", "POST", `{"sig":"` + signPH + `"}`, [2]string{}, 200},
		{"query", "api.staging.example.test", "/v1/x?access_token=" + signPH, "GET", "", [2]string{}, 403},
		{"path", "api.staging.example.test", "/v1/" + signPH, "GET", "", [2]string{}, 403},
		{"other header", "api.staging.example.test", "/v1/x", "GET", "", [2]string{"X-Debug", signPH}, 403},
		{"cookie", "api.staging.example.test", "/v1/x", "GET", "", [2]string{"Cookie", "s=" + signPH}, 403},
		{"injected header", "api.staging.example.test", "/v1/x", "GET", "", [2]string{"Authorization", "Bearer " + signPH}, 403},
		{"body without sentinel_body", "api.staging.example.test", "/v1/x", "POST", "k=" + signPH, [2]string{}, 403},
		{"header on a body-only host", "hooks.example.test", "/hook", "POST", "x", [2]string{"X-Sign", signPH}, 403},
		{"another host", "docs.example.test", "/", "GET", "", [2]string{"X-Sign", signPH}, 403},
	}
	for _, cl := range e.reflectClients() {
		for _, a := range attempts {
			e.w.reset()
			req, _ := http.NewRequest(a.method, e.url(a.host, a.path), strings.NewReader(a.body))
			if a.header[0] != "" {
				req.Header.Set(a.header[0], a.header[1])
			}
			resp, err := cl.c.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", cl.name, a.name, err)
			}
			resp.Body.Close()
			seen := e.w.requests()
			if resp.StatusCode != a.want {
				t.Fatalf("%s %s: status %d, want %d (upstream saw %+v)", cl.name, a.name, resp.StatusCode, a.want, seen)
			}
			if a.want == 200 {
				if len(seen) != 1 || !strings.Contains(seen[0].Header.Get("X-Sign")+seen[0].Body, signSecret) {
					t.Fatalf("%s %s: not swapped upstream: %+v", cl.name, a.name, seen)
				}
				continue
			}
			if resp.Header.Get(HeaderRule) != ruleSentinel {
				t.Fatalf("%s %s: rule %q", cl.name, a.name, resp.Header.Get(HeaderRule))
			}
			if len(seen) != 0 {
				t.Fatalf("%s %s: forwarded: %+v", cl.name, a.name, seen)
			}
		}
	}
	ev := e.ev.waitFor(t, "secret egress event", func(ev audit.Event) bool {
		return ev.Kind == audit.KindHTTP && ev.HTTP.Secret == "sign-key" && ev.Rule == ruleSentinel &&
			strings.Contains(ev.Reason, "URL query")
	})
	if ev.Verdict != "deny" || ev.HTTP.Status != http.StatusForbidden {
		t.Errorf("event %+v", ev)
	}
	if f := leaked(e.ev.dump()); f != "" {
		t.Fatalf("an event carries the secret (%q)", f)
	}
}

// TestConnectionNamingGuardedField: a Connection header naming a framing
// or identity field, the injected header or a sentinel header gets 400
// and is never forwarded — inside an inspected tunnel and on a plain
// explicit proxy request; naming an ordinary field still passes.
func TestConnectionNamingGuardedField(t *testing.T) {
	e := newReflectEnv(t)
	host := fmt.Sprintf("api.staging.example.test:%d", e.w.tlsPort)
	for _, tc := range []struct {
		conn string
		want int
	}{
		{"Content-Length", 400}, {"host", 400}, {"keep-alive, Transfer-Encoding", 400},
		{"Authorization", 400}, {"x-sign", 400}, {"keep-alive, X-Other", 200},
	} {
		e.w.reset()
		c, err := e.tlsThroughTransparent(e.worldDst(), "api.staging.example.test")
		if err != nil {
			t.Fatal(err)
		}
		resp := rawExchange(t, c, "GET /v1/x HTTP/1.1\r\nHost: "+host+"\r\nX-Other: 1\r\nConnection: "+tc.conn+"\r\n\r\n")
		if resp.StatusCode != tc.want {
			t.Fatalf("Connection: %s: status %d, want %d", tc.conn, resp.StatusCode, tc.want)
		}
		if tc.want == 400 {
			if resp.Header.Get(HeaderRule) != ruleFraming || len(e.w.requests()) != 0 {
				t.Fatalf("Connection: %s: rule %q, forwarded %d", tc.conn, resp.Header.Get(HeaderRule), len(e.w.requests()))
			}
		}
	}
	e.ev.waitFor(t, "framing refusal", func(ev audit.Event) bool {
		return ev.Kind == audit.KindHTTP && ev.Rule == ruleFraming && strings.Contains(ev.Reason, "Authorization")
	})

	// The plain explicit path (the default test world's plain category).
	p := newEnv(t)
	for _, conn := range []string{"Content-Length", "Host", "Transfer-Encoding"} {
		c := dialExplicit(t, p)
		u := fmt.Sprintf("http://plain.example.test:%d/p", p.w.plainPort)
		resp := rawExchange(t, c, "GET "+u+" HTTP/1.1\r\nHost: "+strings.TrimPrefix(u[:strings.LastIndex(u, "/")], "http://")+"\r\nConnection: "+conn+"\r\n\r\n")
		if resp.StatusCode != 400 || resp.Header.Get(HeaderRule) != ruleFraming {
			t.Fatalf("explicit, Connection: %s: status %d rule %q", conn, resp.StatusCode, resp.Header.Get(HeaderRule))
		}
	}
	if n := len(p.w.requests()); n != 0 {
		t.Fatalf("origin saw %d requests", n)
	}
}

func dialExplicit(t *testing.T, e *env) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", e.explicit, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestConnectionHeaderH2: HTTP/2 has no Connection field (RFC 9113
// §8.2.2): a stream that sends one naming Content-Length or the injected
// header gets 400 from the HTTP/2 server (or a reset) before the engine
// sees it, and nothing is forwarded.
func TestConnectionHeaderH2(t *testing.T) {
	e := newReflectEnv(t)
	for _, conn := range []string{"Content-Length", "Authorization"} {
		c := tls.Client(e.dialTransparent(e.worldDst()), &tls.Config{ServerName: "api.staging.example.test", RootCAs: e.clientRoots(), NextProtos: []string{"h2"}})
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if err := c.Handshake(); err != nil || c.ConnectionState().NegotiatedProtocol != "h2" {
			t.Fatalf("handshake: %v, ALPN %q", err, c.ConnectionState().NegotiatedProtocol)
		}
		io.WriteString(c, http2.ClientPreface)
		fr := http2.NewFramer(c, c)
		fr.WriteSettings()
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", "/v1/x"},
			{":authority", fmt.Sprintf("api.staging.example.test:%d", e.w.tlsPort)}, {"connection", conn}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
		got := ""
		for got == "" {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("connection: %s: %v before an answer", conn, err)
			}
			switch f := f.(type) {
			case *http2.RSTStreamFrame:
				got = "reset " + f.ErrCode.String()
			case *http2.HeadersFrame:
				fields, _ := hpack.NewDecoder(4096, nil).DecodeFull(f.HeaderBlockFragment())
				got = "headers"
				for _, hf := range fields {
					got += " " + hf.Name + "=" + hf.Value
				}
			case *http2.GoAwayFrame:
				got = "goaway " + f.ErrCode.String()
			}
		}
		if got != "reset PROTOCOL_ERROR" && !strings.HasPrefix(got, "headers :status=400 ") {
			t.Fatalf("connection: %s: got %s, want 400 or the stream reset", conn, got)
		}
		c.Close()
	}
	if n := len(e.w.requests()); n != 0 {
		t.Fatalf("origin saw %d requests", n)
	}
}
