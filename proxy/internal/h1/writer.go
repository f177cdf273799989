package h1

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"airlock/proxy/internal/rawio"
)

// Writer is the http.ResponseWriter an HTTP/1.1 client's response is
// written to. Framing is explicit and decided once, at
// WriteHeader: Content-Length when the response names it, chunked
// otherwise (close-delimited for an HTTP/1.0 client), nothing for HEAD,
// 1xx, 204 and 304. It hijacks for WebSocket upgrades.
type Writer struct {
	c    net.Conn
	br   *bufio.Reader // the client's reader (bytes it buffered go to a hijacker)
	bw   *bufio.Writer
	dw   deadlineW
	h    http.Header
	head bool // HEAD request: no body
	v10  bool // HTTP/1.0 client

	wrote    bool
	status   int
	noBody   bool
	chunked  bool
	clen     int64 // -1: not fixed
	n        int64 // body bytes written
	close    bool  // the connection ends after this response
	hijacked bool
	trailers []string
	err      error
	onUp     Upgraded // told when the connection is handed over
}

var (
	_ http.ResponseWriter = (*Writer)(nil)
	_ http.Flusher        = (*Writer)(nil)
	_ http.Hijacker       = (*Writer)(nil)
	_ io.ReaderFrom       = (*Writer)(nil)
)

// deadlineW gives the client's writes a deadline, refreshed at most a few
// times per period (a timer update per write costs more than the write).
type deadlineW struct {
	c  net.Conn
	lc batcher // under c when c is an inspected connection: large writes batched
	d  time.Duration
	dl rawio.LazyDeadline
}

func (w *deadlineW) Write(p []byte) (int, error) {
	if t, ok := w.dl.Due(w.d); ok {
		w.c.SetWriteDeadline(t)
	}
	if w.lc != nil && len(p) > rawio.MaxRecord {
		return w.lc.WriteBatched(w.c, p)
	}
	return w.c.Write(p)
}

// batcher is the socket under an inspected client's tls.Conn, which
// sends the records of one large write with one system call.
type batcher interface {
	WriteBatched(tw io.Writer, p []byte) (int, error)
}

// h1BufSize is the response buffer: a small response's head and body
// leave in one TLS record and one system call. A body longer than what is
// left of it goes through a larger pooled buffer (bodyBufSize) only while
// it is copied, in writes of several records each (one system call each
// on an inspected connection); a waiting exchange holds no more than this.
const h1BufSize = 16 << 10

// bodyBufSize is the most of a long body sent with one write.
const bodyBufSize = rawio.BatchMax

var bodyPool = sync.Pool{New: func() any { b := make([]byte, bodyBufSize); return &b }}

var h1Pool = sync.Pool{New: func() any {
	w := &Writer{h: make(http.Header, 16)}
	w.bw = bufio.NewWriterSize(&w.dw, h1BufSize)
	return w
}}

// Upgraded is told when a Writer hands its connection over after a 101
// response (Hijack).
type Upgraded interface{ Upgraded() }

// Phraser gives the reason phrase of a final status line (empty: the
// standard text). GetWriter's onUp is asked when it is one.
type Phraser interface{ Phrase(code int) string }

// GetWriter returns a pooled Writer for the response to req on c, whose
// reader is br. Writes have the idle deadline, pushed back lazily from
// dl (the connection's write deadline state, see Deadline); onUp is told
// of a protocol switch.
func GetWriter(c net.Conn, br *bufio.Reader, req *http.Request, idle time.Duration, dl rawio.LazyDeadline, onUp Upgraded) *Writer {
	w := h1Pool.Get().(*Writer)
	w.c, w.br, w.onUp = c, br, onUp
	w.dw = deadlineW{c: c, d: idle, dl: dl}
	if tc, ok := c.(*tls.Conn); ok {
		w.dw.lc, _ = tc.NetConn().(batcher)
	}
	w.head = req.Method == http.MethodHead
	w.v10 = !req.ProtoAtLeast(1, 1)
	return w
}

// PutWriter gives w back to the pool (unless a hijacker owns it). What
// its buffer still holds is dropped: a failed write's error (bufio keeps
// it, and would fail the next connection's first write) and the bytes of
// a response that was aborted or never flushed (they belong to this
// connection, never to the next).
func PutWriter(w *Writer) {
	if w.hijacked {
		return // the hijacker owns the buffers now
	}
	w.bw.Reset(&w.dw)
	// Keep the header's keys and value arrays for the next response
	// (the engine appends into them), unless a response brought many.
	h := w.h
	if len(h) > 32 {
		h = make(http.Header, 16)
	} else {
		for k, v := range h {
			h[k] = v[:0]
		}
	}
	*w = Writer{h: h, bw: w.bw}
	h1Pool.Put(w)
}

func (w *Writer) Header() http.Header { return w.h }

// Status is the final status written (0 before WriteHeader).
func (w *Writer) Status() int { return w.status }

// BodyBytes is how many body bytes were written.
func (w *Writer) BodyBytes() int64 { return w.n }

// Hijacked reports whether the connection was handed over.
func (w *Writer) Hijacked() bool { return w.hijacked }

// Deadline is the connection's write deadline state, for the next
// response's GetWriter.
func (w *Writer) Deadline() rawio.LazyDeadline { return w.dw.dl }

// WriteHeader writes the status line and the header fields.
func (w *Writer) WriteHeader(code int) {
	if w.wrote || w.hijacked {
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		w.writeHead(code) // informational: the final response follows
		return
	}
	w.wrote, w.status = true, code
	w.frame(code)
	w.writeHead(code)
}

// frame decides the body's framing and the connection's fate.
func (w *Writer) frame(code int) {
	h := w.h
	if headerHasToken(h["Connection"], "close") || w.v10 {
		w.close = true
	}
	w.clen = -1
	for _, t := range h["Trailer"] {
		for name := range strings.SplitSeq(t, ",") {
			if name = strings.TrimSpace(name); name != "" {
				w.trailers = append(w.trailers, http.CanonicalHeaderKey(name))
			}
		}
	}
	delete(h, "Transfer-Encoding")
	switch {
	case code == http.StatusSwitchingProtocols:
		w.noBody = true
		return // Connection and Upgrade as the engine set them
	case w.head || code == http.StatusNoContent || code == http.StatusNotModified:
		w.noBody = true
		if code == http.StatusNoContent {
			delete(h, "Content-Length")
		}
	case len(w.trailers) == 0 && len(h["Content-Length"]) == 1:
		n, err := strconv.ParseInt(h["Content-Length"][0], 10, 64)
		if err == nil && n >= 0 {
			w.clen = n
			break
		}
		delete(h, "Content-Length")
		w.frameUnknown()
	default:
		delete(h, "Content-Length")
		w.frameUnknown()
	}
	delete(h, "Connection")
	delete(h, "Keep-Alive")
}

func (w *Writer) frameUnknown() {
	if w.v10 {
		w.close = true // the end of the body is the end of the connection
		return
	}
	w.chunked = true
}

// VisibleASCII is s with every byte a status line may not carry (a
// control character, or outside ASCII) replaced by '?'.
func VisibleASCII(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r > '~' {
			return '?'
		}
		return r
	}, s)
}

// phrase is the status line's reason phrase: the onUp Phraser's for a
// final status, with anything but visible ASCII and spaces replaced,
// else the standard text.
func (w *Writer) phrase(code int) string {
	if ph, ok := w.onUp.(Phraser); ok && w.wrote {
		if s := ph.Phrase(code); s != "" {
			return VisibleASCII(s)
		}
	}
	return http.StatusText(code)
}

func (w *Writer) writeHead(code int) {
	bw := w.bw
	bw.WriteString("HTTP/1.1 ")
	bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(code), 10))
	bw.WriteByte(' ')
	bw.WriteString(w.phrase(code))
	bw.WriteString("\r\n")
	var arr [32]string
	keys := arr[:0]
	for k, vs := range w.h {
		if len(vs) > 0 && !strings.HasPrefix(k, http.TrailerPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range w.h[k] {
			writeField(bw, k, v)
		}
	}
	if w.chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if w.close && w.status >= 200 {
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("\r\n")
}

func writeField(bw *bufio.Writer, k, v string) {
	bw.WriteString(k)
	bw.WriteString(": ")
	if strings.ContainsAny(v, "\r\n") {
		v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
	}
	bw.WriteString(strings.TrimSpace(v))
	bw.WriteString("\r\n")
}

func headerHasToken(vals []string, tok string) bool {
	for _, v := range vals {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), tok) {
				return true
			}
		}
	}
	return false
}

var errBodyLength = errors.New("proxy: response body longer than its Content-Length")

// Write writes body bytes with the response's framing.
func (w *Writer) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	switch {
	case w.hijacked:
		return 0, http.ErrHijacked
	case w.err != nil:
		return 0, w.err
	case w.noBody:
		return 0, http.ErrBodyNotAllowed
	case len(p) == 0:
		return 0, nil
	}
	var err error
	if w.clen >= 0 && w.n+int64(len(p)) > w.clen {
		p, err = p[:w.clen-w.n], errBodyLength
	}
	if w.chunked {
		w.bw.Write(strconv.AppendInt(w.bw.AvailableBuffer(), int64(len(p)), 16))
		w.bw.WriteString("\r\n")
	}
	n, werr := w.bw.Write(p)
	w.n += int64(n)
	if w.chunked && werr == nil {
		w.bw.WriteString("\r\n")
		// A body of unknown length may be a stream: pass it on now.
		werr = w.bw.Flush()
	}
	if werr != nil {
		w.err = werr
		return n, werr
	}
	if err != nil {
		w.err = err
	}
	return n, err
}

// ReadFrom copies a body without a buffer of its own: a body of known
// length is read straight into the connection's write buffer.
func (w *Writer) ReadFrom(r io.Reader) (int64, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.chunked || w.clen < 0 || w.noBody || w.hijacked || w.err != nil {
		return w.copyVia(r)
	}
	if w.clen-w.n > int64(w.bw.Available()) {
		return w.copyLong(r)
	}
	var total int64
	for w.n < w.clen {
		if w.bw.Available() == 0 {
			if err := w.bw.Flush(); err != nil {
				w.err = err
				return total, err
			}
		}
		buf := w.bw.AvailableBuffer()
		buf = buf[:min(int64(cap(buf)), w.clen-w.n)]
		n, err := r.Read(buf)
		if n > 0 {
			w.bw.Write(buf[:n]) // already in place: only the length moves
			w.n += int64(n)
			total += int64(n)
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// readier is a body that can tell whether its next bytes are already
// in the proxy's buffers (a read returns without waiting).
type readier interface{ ready() bool }

// copyLong copies a body of known length longer than the response
// buffer: the head leaves first, then the body in pieces of up to
// bodyBufSize, each gathered while the upstream has bytes ready and sent
// with one write. Bytes that arrived are never held back waiting for
// more; a body that cannot tell whether more is ready is sent read by
// read.
func (w *Writer) copyLong(r io.Reader) (int64, error) {
	if err := w.bw.Flush(); err != nil {
		w.err = err
		return 0, err
	}
	bp := bodyPool.Get().(*[]byte)
	defer bodyPool.Put(bp)
	buf := *bp
	rd, _ := r.(readier)
	var total int64
	for w.n < w.clen {
		want := int(min(int64(len(buf)), w.clen-w.n))
		m := 0
		var rerr error
		for m < want && rerr == nil {
			var k int
			k, rerr = r.Read(buf[m:want])
			m += k
			if rd == nil || !rd.ready() {
				break
			}
		}
		if m > 0 {
			k, werr := w.dw.Write(buf[:m])
			w.n += int64(k)
			total += int64(k)
			if werr != nil {
				w.err = werr
				return total, werr
			}
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
	return total, nil
}

var copyPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (w *Writer) copyVia(r io.Reader) (int64, error) {
	bp := copyPool.Get().(*[]byte)
	defer copyPool.Put(bp)
	var total int64
	for {
		n, err := r.Read(*bp)
		if n > 0 {
			m, werr := w.Write((*bp)[:n])
			total += int64(m)
			if werr != nil {
				return total, werr
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// Flush sends what is buffered.
func (w *Writer) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.hijacked || w.err != nil {
		return
	}
	if err := w.bw.Flush(); err != nil {
		w.err = err
	}
}

// Hijack hands the connection over after a 101 response (the engine's
// WebSocket relay). Reads refresh the idle deadline.
func (w *Writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.hijacked {
		return nil, nil, http.ErrHijacked
	}
	if err := w.bw.Flush(); err != nil {
		return nil, nil, err
	}
	w.hijacked = true
	if w.onUp != nil {
		w.onUp.Upgraded()
	}
	c := &idleConn{Conn: w.c, d: w.dw.d}
	w.c.SetWriteDeadline(time.Time{})
	return c, bufio.NewReadWriter(w.br, bufio.NewWriter(c)), nil
}

// errResponseAborted marks a response the proxy cut off.
var errResponseAborted = errors.New("proxy: response aborted")

// Abort breaks the response: no last chunk, nothing more flushed, and the
// connection closes, so the client never takes a cut body for the whole.
func (w *Writer) Abort() {
	if w.err == nil {
		w.err = errResponseAborted
	}
	w.close = true
}

// Finish ends the response: the last chunk and trailers, then a flush.
// It reports whether the connection can carry another request.
func (w *Writer) Finish() (bool, error) {
	if w.hijacked {
		return false, nil
	}
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.err == nil && w.chunked {
		w.bw.WriteString("0\r\n")
		for _, k := range w.trailers {
			for _, v := range w.h[k] {
				writeField(w.bw, k, v)
			}
		}
		for k, vs := range w.h {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
				for _, v := range vs {
					writeField(w.bw, name, v)
				}
			}
		}
		w.bw.WriteString("\r\n")
	}
	if w.err == nil {
		w.err = w.bw.Flush()
	}
	if w.clen >= 0 && w.n != w.clen && !w.noBody {
		return false, errors.Join(w.err, errors.New("proxy: response body shorter than its Content-Length"))
	}
	return w.err == nil && !w.close, w.err
}

// idleConn is a hijacked client connection whose reads have the idle
// deadline.
type idleConn struct {
	net.Conn
	d  time.Duration
	dl rawio.LazyDeadline
}

func (c *idleConn) Read(p []byte) (int, error) {
	if t, ok := c.dl.Due(c.d); ok {
		c.Conn.SetReadDeadline(t)
	}
	return c.Conn.Read(p)
}
