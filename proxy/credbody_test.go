package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"airlock/audit"
)

// piecesReader gives its pieces one read each, a little apart, so that
// the proxy reads them apart (a placeholder split across reads); it has
// no length, so the body is chunked (HTTP/1.1) or unsized (HTTP/2).
type piecesReader struct{ pieces [][]byte }

func (r *piecesReader) Read(p []byte) (int, error) {
	if len(r.pieces) == 0 {
		return 0, io.EOF
	}
	time.Sleep(5 * time.Millisecond)
	n := copy(p, r.pieces[0])
	if r.pieces[0] = r.pieces[0][n:]; len(r.pieces[0]) == 0 {
		r.pieces = r.pieces[1:]
	}
	return n, nil
}

// TestSentinelInStreamedBody: a placeholder in a request body the proxy
// cannot buffer before forwarding — one without a length (chunked, or an
// HTTP/2 stream without content-length) or one over maxScanBody — and
// split across reads, sent to a host that is not its own or that does not
// swap it in the body, is found as the body streams: the body stops
// before the placeholder leaves, the request is refused (403,
// proxy.sentinel) and the refusal names the secret; over HTTP/1.1 and
// HTTP/2. A streamed body without one passes whole.
func TestSentinelInStreamedBody(t *testing.T) {
	e := newReflectEnv(t)
	big := bytes.Repeat([]byte("a"), maxScanBody+1000)
	half := len(signPH) / 2
	type attempt struct {
		name, host string
		body       func() io.Reader
		want       int
	}
	split := func() io.Reader {
		return &piecesReader{[][]byte{[]byte("k=v&sig=" + signPH[:half]), []byte(signPH[half:] + "&end")}}
	}
	attempts := []attempt{
		{"chunked, another host", "docs.example.test", split, 403},
		{"chunked, no sentinel_body", "api.staging.example.test", split, 403},
		{"oversized, another host", "docs.example.test", func() io.Reader {
			return bytes.NewReader(append(append([]byte{}, big...), signPH...))
		}, 403},
		{"big chunked, split at a piece", "docs.example.test", func() io.Reader {
			return &piecesReader{[][]byte{append(append([]byte{}, big...), signPH[:3]...), []byte(signPH[3:])}}
		}, 403},
		{"chunked without a placeholder", "docs.example.test", func() io.Reader {
			return &piecesReader{[][]byte{[]byte("k=" + signPH[:half]), []byte("-not-it" + signPH[:half])}}
		}, 200},
	}
	for _, cl := range e.reflectClients() {
		for _, a := range attempts {
			e.w.reset()
			req, _ := http.NewRequest("POST", e.url(a.host, "/v1/x"), a.body())
			start := time.Now()
			resp, err := cl.c.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", cl.name, a.name, err)
			}
			resp.Body.Close()
			t.Logf("%s %s: %d in %v", cl.name, a.name, resp.StatusCode, time.Since(start))
			seen := e.w.requests()
			if resp.StatusCode != a.want {
				t.Fatalf("%s %s: status %d, want %d (upstream saw %d requests)", cl.name, a.name, resp.StatusCode, a.want, len(seen))
			}
			for _, s := range seen {
				if strings.Contains(s.Body, signPH) || strings.Contains(s.Body, signSecret) {
					t.Fatalf("%s %s: the upstream got the placeholder or the secret", cl.name, a.name)
				}
			}
			if a.want == 200 {
				if n := len(seen); n == 0 || !strings.HasSuffix(seen[n-1].Body, "-not-it"+signPH[:half]) {
					t.Fatalf("%s %s: body not passed whole (%d requests)", cl.name, a.name, n)
				}
				continue
			}
			if resp.Header.Get(HeaderRule) != ruleSentinel {
				t.Fatalf("%s %s: rule %q", cl.name, a.name, resp.Header.Get(HeaderRule))
			}
		}
	}
	for _, want := range []string{"its own hosts", "in the body"} {
		e.ev.waitFor(t, "secret egress event: "+want, func(ev audit.Event) bool {
			return ev.Kind == audit.KindHTTP && ev.HTTP.Secret == "sign-key" && ev.Rule == ruleSentinel &&
				ev.HTTP.Status == http.StatusForbidden && strings.Contains(ev.Reason, want)
		})
	}
}

// TestSwapBodyReadError: a body the proxy reads to swap a placeholder in
// that cannot be read (bad chunking) is the client's error, 400 with the
// framing rule, not 413; a body over the swap bound is 413. Nothing is
// forwarded.
func TestSwapBodyReadError(t *testing.T) {
	e := newReflectEnv(t)
	host := fmt.Sprintf("hooks.example.test:%d", e.w.tlsPort)
	for _, tc := range []struct {
		name, body string
		status     int
		rule       string
	}{
		{"bad chunk", "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n\r\n", 400, ruleFraming},
		{"too large", fmt.Sprintf("Content-Length: %d\r\n\r\n", maxSwapBody+1) + strings.Repeat("b", maxSwapBody+1), 413, ruleBodyLimit},
	} {
		e.w.reset()
		c, err := e.tlsThroughTransparent(e.worldDst(), "hooks.example.test")
		if err != nil {
			t.Fatal(err)
		}
		resp := rawExchange(t, c, "POST /hook HTTP/1.1\r\nHost: "+host+"\r\n"+tc.body)
		c.Close()
		if resp.StatusCode != tc.status || resp.Header.Get(HeaderRule) != tc.rule {
			t.Fatalf("%s: status %d rule %q, want %d %s", tc.name, resp.StatusCode, resp.Header.Get(HeaderRule), tc.status, tc.rule)
		}
		if n := len(e.w.requests()); n != 0 {
			t.Fatalf("%s: forwarded %d requests", tc.name, n)
		}
	}
	e.ev.waitFor(t, "bad body event", func(ev audit.Event) bool {
		return ev.Kind == audit.KindHTTP && ev.Rule == ruleFraming && strings.Contains(ev.Reason, "bad request body")
	})
}

// TestChunkedBodyKeepAlive: after a small chunked request body (which the
// proxy reads whole before forwarding), the inspected connection carries
// the next request at once; it used to wait out the idle timeout, the
// chunked body never counted as read to its end.
func TestChunkedBodyKeepAlive(t *testing.T) {
	e := newReflectEnv(t)
	c := e.reflectClients()[0].c // HTTP/1.1, keep-alive
	c.Timeout = 5 * time.Second
	for i := range 3 {
		req, _ := http.NewRequest("POST", e.url("docs.example.test", "/v1/x"), &piecesReader{[][]byte{[]byte("a=1"), []byte("&b=2")}})
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("request %d on the kept-alive connection: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
}
