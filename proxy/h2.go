package proxy

import (
	"context"
	"io"
	"net"
	"net/http"

	"golang.org/x/net/http2"
)

// serveH2 serves an inspected HTTP/2 client connection; every stream is a
// request decided on its own.
func (p *Proxy) serveH2(ctx context.Context, sc *scope, c net.Conn) string {
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
	return "done"
}

func (p *Proxy) h2Request(sc *scope, w http.ResponseWriter, r *http.Request) {
	resp := p.roundTrip(r.Context(), sc, r, r.Host)
	defer resp.Body.Close()
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = vs
	}
	h.Del("Connection")
	if resp.ContentLength >= 0 && r.Method != http.MethodHead {
		h.Set("Content-Length", itoa(resp.ContentLength))
	}
	w.WriteHeader(resp.StatusCode)
	if r.Method == http.MethodHead {
		return
	}
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if resp.ContentLength < 0 {
				rc.Flush()
			}
		}
		if err != nil {
			if err != io.EOF {
				panic(http.ErrAbortHandler)
			}
			return
		}
	}
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	if n == 0 {
		return "0"
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
