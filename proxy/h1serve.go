package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"airlock/proxy/internal/h1"
	"airlock/proxy/internal/rawio"
)

// firstReq is a request already read from the connection.
type firstReq struct {
	req  *http.Request
	head *reqHead
}

// serveHTTP1 serves HTTP/1.x requests on c until the client closes, a
// request cannot be framed unambiguously, or a body is left unread.
func (p *Proxy) serveHTTP1(ctx context.Context, sc *scope, c net.Conn, first *firstReq) closeReason {
	var br *bufio.Reader
	if bc, ok := c.(*bufConn); ok {
		br = bc.br
	} else {
		br = bufio.NewReaderSize(c, 16<<10)
	}
	// Deadlines are pushed back at most a few times per idle period (a
	// timer update costs more than a small request): a keep-alive
	// connection waits between idle*7/8 and idle for its next request.
	var dl h1Deadlines
	idle := p.cfg.IdleTimeout
	for n := 0; ; n++ {
		var req *http.Request
		var head *reqHead
		if n == 0 && first != nil {
			req, head = first.req, first.head
		} else {
			if t, ok := dl.rd.Due(idle); ok {
				c.SetReadDeadline(t)
			}
			if _, err := br.Peek(1); err != nil {
				return readEndReason(err)
			}
			if !h1.HeadBuffered(br) {
				c.SetReadDeadline(time.Now().Add(p.cfg.ReadHeaderTimeout))
				dl.rd.Reset()
			}
			var err error
			req, head, err = h1.ReadRequest[reqSlot](br, p.cfg.MaxHeaderBytes)
			if err != nil {
				return p.framingError(sc, c, err)
			}
		}
		if req.Body != http.NoBody {
			req.Body = &deadlineBody{rc: req.Body, c: c, d: idle}
			dl.rd.Reset()
		}
		if reason, more := p.exchange(ctx, sc, c, br, req, head, &dl); !more {
			return reason
		}
	}
}

// h1Deadlines is when a connection's read and write deadlines were last
// pushed back.
type h1Deadlines struct{ rd, wr rawio.LazyDeadline }

// reqHead is a request head as the strict parser read it, with the
// storage of the request's state (one allocation per request).
type reqHead = h1.Head[reqSlot]

// reqSlot is the storage parsing a request head allocates for the
// request's exch and the engine's copy of the request.
type reqSlot struct {
	x    exch
	xreq http.Request
}

// exchange hands one request to the engine and writes its response;
// more reports whether the connection can carry another request.
func (p *Proxy) exchange(ctx context.Context, sc *scope, c net.Conn, br *bufio.Reader, req *http.Request, head *reqHead, dl *h1Deadlines) (closeReason, bool) {
	clientClose := req.Close
	var sig *signalBody
	if req.Body != http.NoBody {
		sig = &signalBody{rc: req.Body, closed: make(chan struct{})}
		req.Body = sig
	}
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") && req.ContentLength != 0 {
		// The proxy, not the upstream, asks for the body: once the
		// request was allowed and the body is read.
		req.Body = &continueBody{rc: req.Body, w: c}
	}
	x, xreq := p.newExch(ctx, sc, req, head.Host(), &head.Slot.x, &head.Slot.xreq)
	w := h1.GetWriter(c, br, req, p.cfg.IdleTimeout, dl.wr, x)
	defer h1.PutWriter(w)
	p.engine.ServeHTTP(w, xreq)
	if x.ev.cutOff() {
		w.Abort()
	}
	more, err := w.Finish()
	dl.wr = w.Deadline()
	p.finish(&x.ev, w.Status(), x.up.n, w.BodyBytes())
	switch {
	case w.Hijacked():
		return reasonUpgraded, false
	case err != nil:
		return reasonWriteError, false
	case !more || clientClose:
		lingerClose(c)
		return reasonDone, false
	}
	if sig != nil && (!sig.wait(unwrapBody(sig.rc), p.cfg.IdleTimeout) || !h1.Drain(unwrapBody(sig.rc), 256<<10)) {
		return reasonBodyUnread, false
	}
	return "", true
}

// framingError answers a request that cannot be framed safely with 400.
func (p *Proxy) framingError(sc *scope, c net.Conn, err error) closeReason {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isTimeout(err) {
		return readEndReason(err)
	}
	status, v := framingVerdict(err)
	ev := p.newReqEvent(sc.f, sc.scheme, &http.Request{URL: &url.URL{}})
	resp := p.refuse(ev, nil, status, v)
	h1.WriteRefusal(c, resp, false)
	lingerClose(c)
	return reasonBadRequest
}

func readEndReason(err error) closeReason {
	switch {
	case isTimeout(err):
		return reasonIdle
	case errors.Is(err, io.EOF):
		return reasonClientClosed
	}
	return reasonClientError
}

// lingerClose half-closes and discards briefly what the client still
// sends, so it reads the response before the connection resets.
func lingerClose(c net.Conn) {
	rawio.CloseWrite(c)
	c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	io.Copy(io.Discard, io.LimitReader(c, 256<<10))
}
