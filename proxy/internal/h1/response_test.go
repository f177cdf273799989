package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var responseSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"HTTP/1.1 204 No Content\r\nX-A: 1\r\nx-a: 2\r\n\r\n",
	"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
	"HTTP/1.0 200 OK\r\n\r\nuntil close",
	"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil close",
	"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n0\r\nX-T: 1\r\n\r\n",
}

// TestQuickResponseMatchesNetHTTP: where the quick response parser takes
// a response, it reads what net/http reads from the same bytes.
func TestQuickResponseMatchesNetHTTP(t *testing.T) {
	for _, s := range responseSeeds {
		checkResponseAgainstNetHTTP(t, []byte(s), "GET")
		checkResponseAgainstNetHTTP(t, []byte(s), "HEAD")
	}
	if _, ok := quickResponse(bufio.NewReader(bytes.NewReader([]byte(responseSeeds[0]))), &http.Request{Method: "GET"}); !ok {
		t.Fatal("the common response shape took the slow path")
	}
}

// FuzzQuickResponse: the quick parser never panics and never reads a
// response differently from net/http.
func FuzzQuickResponse(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, b []byte, head bool) {
		m := "GET"
		if head {
			m = "HEAD"
		}
		checkResponseAgainstNetHTTP(t, b, m)
	})
}

func checkResponseAgainstNetHTTP(t *testing.T, b []byte, method string) {
	t.Helper()
	req := &http.Request{Method: method}
	got, ok := quickResponse(bufio.NewReaderSize(bytes.NewReader(b), 4096), req)
	if !ok {
		return
	}
	want, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), req)
	if err != nil {
		t.Fatalf("%q: quick parser took it, net/http refuses it: %v", b, err)
	}
	gb, gerr := io.ReadAll(got.Body)
	wb, werr := io.ReadAll(want.Body)
	type view struct {
		Status, Proto string
		Code, Minor   int
		Close         bool
		ContentLength int64
		Chunked       bool
		Header        http.Header
		Body          string
		BodyErr       bool
	}
	w := view{want.Status, want.Proto, want.StatusCode, want.ProtoMinor, want.Close, want.ContentLength, len(want.TransferEncoding) > 0, want.Header, string(wb), werr != nil}
	g := view{got.Status, got.Proto, got.StatusCode, got.ProtoMinor, got.Close, got.ContentLength, len(got.TransferEncoding) > 0, got.Header, string(gb), gerr != nil}
	if g.Header.Get("Cache-Control") == "" {
		w.Header.Del("Cache-Control") // net/http's Pragma fix; a proxy passes what it got
	}
	if d := cmp.Diff(w, g); d != "" {
		t.Fatalf("%q %s: differs from net/http (-net/http +quick):\n%s", b, method, d)
	}
}
