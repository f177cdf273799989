package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"

	"golang.org/x/net/http2"
)

// serveH2 serves an inspected HTTP/2 client connection; every stream is a
// request decided on its own.
func (p *Proxy) serveH2(ctx context.Context, sc *scope, c net.Conn) closeReason {
	//lint:ignore SA1019 ServeConn serves one already-accepted connection; net/http has no equivalent.
	srv := &http2.Server{}
	hs := &http.Server{
		MaxHeaderBytes: p.cfg.MaxHeaderBytes, ReadHeaderTimeout: p.cfg.ReadHeaderTimeout, IdleTimeout: p.cfg.IdleTimeout,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 250, MaxReadFrameSize: 1 << 20},
	}
	//lint:ignore SA1019 see above.
	srv.ServeConn(c, &http2.ServeConnOpts{
		Context:    ctx,
		BaseConfig: hs,
		Handler:    http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.h2Request(sc, w, r) }),
	})
	return reasonDone
}

// h2Request hands one stream's request to the engine.
func (p *Proxy) h2Request(sc *scope, w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		ev := p.newReqEvent(sc.f, sc.scheme, r)
		resp := p.refuse(ev, r, http.StatusBadRequest, internalDeny(ruleProtocol, "CONNECT inside an inspected tunnel"))
		writeH2(w, resp)
		return
	}
	x, xreq := p.newExch(r.Context(), sc, r, r.Host, nil, nil)
	hw := &h2Writer{ResponseWriter: w}
	p.engine.ServeHTTP(hw, xreq)
	p.finish(&x.ev, hw.status, x.up.n, hw.n)
	if x.ev.cutOff() {
		// The body was cut off (reflect.go): reset the stream, so the
		// client never takes the part it got for the whole.
		panic(http.ErrAbortHandler)
	}
}

// h2Writer counts what the engine writes to a stream and drops the
// connection-specific fields HTTP/2 forbids.
type h2Writer struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *h2Writer) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
		h := w.Header()
		delete(h, "Connection")
		delete(h, "Keep-Alive")
		delete(h, "Transfer-Encoding")
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *h2Writer) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

func (w *h2Writer) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func writeH2(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		if k != "Connection" {
			w.Header()[k] = vs
		}
	}
	w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}
