package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

type failingBody struct{ err error }

func (b failingBody) Read([]byte) (int, error) { return 0, b.err }
func (b failingBody) Close() error             { return nil }

// TestReadMetaNamesNoAddress: a metadata body cut by the connection gives
// the sandbox a reason without the transport's text (which names the
// appliance's and the registry's addresses); the error is kept for the
// log. A corrupt gzip body keeps its own text.
func TestReadMetaNamesNoAddress(t *testing.T) {
	conn := &net.OpError{Op: "read", Net: "tcp", Source: &net.TCPAddr{IP: net.IPv4(198, 18, 0, 1), Port: 40000},
		Addr: &net.TCPAddr{IP: net.IPv4(198, 18, 7, 7), Port: 443}, Err: errors.New("connection reset by peer")}
	for _, enc := range []string{"", "gzip"} {
		resp := &http.Response{Header: http.Header{}, Body: failingBody{conn}}
		if enc != "" {
			resp.Header.Set("Content-Encoding", enc)
		}
		_, err := readMeta(resp)
		var op *net.OpError
		if err == nil || strings.Contains(err.Error(), "198.18.") || !errors.As(err, &op) {
			t.Errorf("encoding %q: %v", enc, err)
		}
	}
	resp := &http.Response{Header: http.Header{"Content-Encoding": {"gzip"}}, Body: io.NopCloser(strings.NewReader("not gzip at all"))}
	if _, err := readMeta(resp); err == nil || !strings.Contains(err.Error(), "gzip: invalid header") {
		t.Errorf("corrupt gzip: %v", err)
	}
}
