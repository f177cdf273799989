package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var requestSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a.example.test\r\n\r\n",
	"GET http://a.example.test:8080/x?y=1 HTTP/1.1\r\nHost: a.example.test:8080\r\nUser-Agent: t\r\nAccept: */*\r\n\r\n",
	"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
	"POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"GET /a HTTP/1.0\r\n\r\n",
	"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
	"CONNECT a.example.test:443 HTTP/1.1\r\nHost: a.example.test:443\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET / HTTP/1.1\r\nhost: h\r\nx-lower: a\r\nX-Dup: 1\r\nx-dup: 2\r\nPragma: no-cache\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX-A: b\r\n c\r\n\r\n",
	"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
	"GET /a HTTP/1.1\nHost: h\n\n",
	"GET /%zz HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: h\r\nX: \t v \t\r\n\r\n",
}

// TestParseHeadMatchesNetHTTP: for requests the strict parser accepts,
// the request it builds is the one net/http builds from the same bytes.
func TestParseHeadMatchesNetHTTP(t *testing.T) {
	for _, s := range requestSeeds {
		checkAgainstNetHTTP(t, []byte(s))
	}
	// And the seeds that must be refused are.
	for _, s := range []string{requestSeeds[9], requestSeeds[10], requestSeeds[11], requestSeeds[12]} {
		if _, _, err := ReadRequest[struct{}](bufio.NewReader(strings.NewReader(s)), 64<<10); !errors.Is(err, ErrFraming) {
			t.Errorf("%q: err %v, want a framing error", s, err)
		}
	}
}

// TestChunkedBodyDone: a chunked body read to its end, trailers
// included, is Done (the connection may carry the next request without
// waiting for the body's user to close it); one read short of its end
// is not, and a bad trailer is a framing error.
func TestChunkedBodyDone(t *testing.T) {
	for _, tc := range []struct {
		body string
		done bool
	}{
		{"3\r\nabc\r\n0\r\n\r\n", true},
		{"3\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\n", true},
		{"3\r\nabc\r\n", false},
		{"3\r\nabc\r\n0\r\nbad trailer\r\n\r\n", false},
	} {
		raw := "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + tc.body
		req, _, err := ReadRequest[struct{}](bufio.NewReader(strings.NewReader(raw)), 64<<10)
		if err != nil {
			t.Fatalf("%q: %v", tc.body, err)
		}
		b, err := io.ReadAll(req.Body)
		if Done(req.Body) != tc.done || tc.done && (err != nil || string(b) != "abc") {
			t.Errorf("%q: Done %v (%q, %v), want %v", tc.body, Done(req.Body), b, err, tc.done)
		}
	}
}

// FuzzReadRequest: the strict parser never panics, never accepts what
// net/http would refuse, and builds the same request net/http builds.
func FuzzReadRequest(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkAgainstNetHTTP(t, b)
	})
}

func checkAgainstNetHTTP(t *testing.T, b []byte) {
	t.Helper()
	for _, size := range []int{16, 4096} { // head in one piece, and line by line
		got, _, err := ReadRequest[struct{}](bufio.NewReaderSize(bytes.NewReader(b), size), 64<<10)
		if err != nil {
			continue
		}
		want, werr := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
		if werr != nil {
			t.Fatalf("%q: accepted, but net/http refuses it: %v", b, werr)
		}
		// net/http adds Cache-Control for Pragma: no-cache; a proxy
		// forwards what the client sent.
		if got.Header.Get("Cache-Control") == "" {
			want.Header.Del("Cache-Control")
		}
		type view struct {
			Method, RequestURI, URL, Host, Proto string
			Minor                                int
			Close                                bool
			Header                               http.Header
		}
		g := view{got.Method, got.RequestURI, got.URL.String(), got.Host, got.Proto, got.ProtoMinor, got.Close, got.Header}
		w := view{want.Method, want.RequestURI, want.URL.String(), want.Host, want.Proto, want.ProtoMinor, want.Close, want.Header}
		if want.ContentLength > 0 || len(want.TransferEncoding) > 0 {
			delete(w.Header, "Content-Length")
			delete(w.Header, "Transfer-Encoding")
			delete(g.Header, "Content-Length")
			delete(g.Header, "Transfer-Encoding")
		}
		if d := cmp.Diff(w, g); d != "" {
			t.Fatalf("%q (buffer %d): request differs from net/http's (-net/http +ours):\n%s", b, size, d)
		}
	}
}

// FuzzRequestURL: the request target's URL is the one
// url.ParseRequestURI builds (and net/http's request reader uses), on its
// fast path too.
func FuzzRequestURL(f *testing.F) {
	for _, s := range []string{"/", "/b", "/a/b?c=d", "/a?", "/a??", "/a?b?c", "/%41", "/a b", "/a!b",
		"//x/y", "/x:y", "*", "http://h.example.test/p?q", "h.example.test:443", "/\x7f", "/é?é"} {
		f.Add(s, http.MethodGet)
	}
	f.Add("h.example.test:443", http.MethodConnect)
	f.Fuzz(func(t *testing.T, target, method string) {
		var dst url.URL
		got, err := requestURL(method, target, &dst)
		raw := target
		if method == http.MethodConnect && !strings.HasPrefix(target, "/") {
			raw = "http://" + target
		}
		want, werr := url.ParseRequestURI(raw)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%q %q: err %v, url.ParseRequestURI's %v", method, target, err, werr)
		}
		if err != nil {
			return
		}
		if raw != target {
			want.Scheme = ""
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q %q: URL %#v, url.ParseRequestURI's %#v", method, target, got, want)
		}
	})
}
