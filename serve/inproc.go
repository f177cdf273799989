package serve

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
)

// inprocTransport sends a client's requests straight to a handler of this
// process (no socket), as the caller it names, and streams the response
// as the handler writes it. The MCP endpoint drives the API this way.
type inprocTransport struct {
	h      http.Handler
	auth   string // the caller's Authorization header ("" on the unix socket)
	remote string // the RemoteAddr the handler sees
	peer   string // the caller's Peer ("" to leave the context's)
	log    *slog.Logger
}

func (t inprocTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	if t.peer != "" {
		ctx = WithPeer(ctx, t.peer)
	}
	r := req.Clone(ctx)
	r.RemoteAddr, r.RequestURI, r.Host = t.remote, req.URL.RequestURI(), req.URL.Host
	r.Header.Del("Authorization")
	if t.auth != "" {
		r.Header.Set("Authorization", t.auth)
	}
	if r.Body == nil {
		r.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeResponse{header: http.Header{}, body: pw, ready: make(chan struct{})}
	go t.serve(w, r, pw, cancel)
	select {
	case <-w.ready:
	case <-req.Context().Done():
		cancel()
		_ = pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	return &http.Response{Status: fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)), StatusCode: w.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: w.sent, ContentLength: -1,
		Body: &cancelBody{PipeReader: pr, cancel: cancel}, Request: req}, nil
}

// serve runs the handler; a panic is logged and ends the response, as the
// HTTP server would end its connection.
func (t inprocTransport) serve(w *pipeResponse, r *http.Request, pw *io.PipeWriter, cancel context.CancelFunc) {
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			if t.log != nil {
				t.log.Error("api: in-process request panicked", "method", r.Method, "path", r.URL.Path, "panic", p)
			}
			w.start(http.StatusInternalServerError)
			_ = pw.CloseWithError(fmt.Errorf("%s %s: handler failed", r.Method, r.URL.Path))
			return
		}
		w.start(http.StatusOK) // a handler that wrote nothing
		_ = pw.Close()
	}()
	t.h.ServeHTTP(w, r)
}

// pipeResponse is the ResponseWriter of an in-process request: the status
// and header when first written, the body through a pipe.
type pipeResponse struct {
	header, sent http.Header
	status       int
	body         *io.PipeWriter
	once         sync.Once
	ready        chan struct{}
}

func (w *pipeResponse) Header() http.Header { return w.header }

func (w *pipeResponse) WriteHeader(code int) {
	if code >= 200 { // 1xx are not the response
		w.start(code)
	}
}

func (w *pipeResponse) start(code int) {
	w.once.Do(func() {
		w.status, w.sent = code, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeResponse) Write(p []byte) (int, error) {
	w.start(http.StatusOK)
	return w.body.Write(p)
}

// Flush is a no-op: every write reaches the reader as it is made.
func (w *pipeResponse) Flush() {}

// cancelBody ends the handler's request when the client closes the body.
type cancelBody struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	b.cancel()
	return b.PipeReader.Close()
}
