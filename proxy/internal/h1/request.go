package h1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrFraming marks a request whose framing is ambiguous or malformed: it
// gets 400 and is never forwarded.
var ErrFraming = errors.New("ambiguous or malformed request framing")

// ErrHeadTooLarge marks a request head over the limit.
var ErrHeadTooLarge = errors.New("request head too large")

// facts is what the strict head scanner learned.
type facts struct {
	host    string // the Host header ("" when absent)
	hasHost bool
	clen    int64 // -1 when absent
	chunked bool
}

// Head is what ReadRequest learned of a request's head beyond the
// request itself, and the caller's storage S, allocated with the request
// (the proxy keeps its per-request state there: one allocation less per
// request).
type Head[S any] struct {
	facts
	Slot S
}

// Host is the Host header's value ("" when absent).
func (h *Head[S]) Host() string { return h.host }

// parsedHead holds what parseHead builds in one allocation.
type parsedHead[S any] struct {
	req  http.Request
	h    Head[S]
	vals [8]string
	url  url.URL
}

var crlfcrlf = []byte("\r\n\r\n")

// HeadBuffered reports whether a whole request head is already buffered.
func HeadBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	return bytes.Contains(b, crlfcrlf)
}

// IsTokenChar reports whether c may be part of an RFC 9110 token (a
// method, a header name).
func IsTokenChar(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
		bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0
}

// readHead reads one request head (request line and header fields up to
// and with the empty line), at most max bytes. A head the reader already
// holds whole is taken in one piece; otherwise it is read line by line,
// each line ended by CRLF.
func readHead(br *bufio.Reader, max int) (string, error) {
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		if i := bytes.Index(b, crlfcrlf); i >= 0 && i+4 <= max {
			s := string(b[:i+4])
			br.Discard(i + 4)
			return s, nil
		}
	}
	var buf []byte
	for {
		line, err := br.ReadSlice('\n')
		if len(buf)+len(line) > max || errors.Is(err, bufio.ErrBufferFull) {
			return "", ErrHeadTooLarge
		}
		if err != nil {
			if len(buf) == 0 && len(line) == 0 {
				return "", err
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		buf = append(buf, line...)
		if !bytes.HasSuffix(line, []byte("\r\n")) {
			return "", fmt.Errorf("%w: line not ended by CRLF", ErrFraming)
		}
		if len(line) == 2 {
			return string(buf), nil
		}
	}
}

// parseHead checks a request head strictly — CRLF line ends only, no
// obs-fold, no control bytes, at most one Content-Length (digits only),
// Transfer-Encoding only as a single "chunked", never both, at most one
// Host — and builds the request from it. Header names and values are
// substrings of s: one allocation holds the whole head.
func parseHead[S any](s string) (*http.Request, *Head[S], error) {
	line, rest, _ := strings.Cut(s, "\r\n")
	method, target, proto, err := requestLine(line)
	if err != nil {
		return nil, nil, err
	}
	// The request, its raw head facts and the values of a typical head
	// share one allocation.
	pa := &parsedHead[S]{h: Head[S]{facts: facts{clen: -1}}}
	h := &pa.h
	n := strings.Count(rest, "\r\n")
	hdr := make(http.Header, n)
	vals := pa.vals[:]
	if n > len(vals) {
		vals = make([]string, n)
	}
	for i := 0; ; i++ {
		line, rest, _ = strings.Cut(rest, "\r\n")
		if line == "" {
			break
		}
		key, value, err := h.field(line)
		if err != nil {
			return nil, nil, err
		}
		if prev, ok := hdr[key]; ok {
			hdr[key] = append(prev, value)
		} else {
			vals[i] = value
			hdr[key] = vals[i : i+1 : i+1]
		}
	}
	if rest != "" {
		return nil, nil, fmt.Errorf("%w: bytes after the head", ErrFraming)
	}
	req := &pa.req
	*req = http.Request{Method: method, RequestURI: target, Proto: proto, ProtoMajor: 1, ProtoMinor: 1, Header: hdr}
	if proto == "HTTP/1.0" {
		req.ProtoMinor = 0
	}
	if req.URL, err = requestURL(method, target, &pa.url); err != nil {
		return nil, nil, err
	}
	req.Host = req.URL.Host
	if req.Host == "" {
		req.Host = h.host
	}
	delete(hdr, "Host")
	req.Close = shouldClose(req.ProtoMinor, hdr["Connection"])
	return req, h, nil
}

// requestLine splits and checks "METHOD target HTTP/1.x".
func requestLine(l string) (method, target, proto string, err error) {
	method, r, ok1 := strings.Cut(l, " ")
	target, proto, ok2 := strings.Cut(r, " ")
	if !ok1 || !ok2 || method == "" || target == "" || strings.Contains(proto, " ") {
		return "", "", "", fmt.Errorf("%w: bad request line", ErrFraming)
	}
	for i := 0; i < len(method); i++ {
		if !IsTokenChar(method[i]) {
			return "", "", "", fmt.Errorf("%w: bad method", ErrFraming)
		}
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c == 0x7f {
			return "", "", "", fmt.Errorf("%w: bad request target", ErrFraming)
		}
	}
	if proto != "HTTP/1.1" && proto != "HTTP/1.0" {
		return "", "", "", fmt.Errorf("%w: unsupported version %q", ErrFraming, proto)
	}
	return method, target, proto, nil
}

// requestURL parses the request target as net/http does: origin form,
// absolute form, "*", or CONNECT's authority form.
// A plain origin-form target (a path of bytes that need no escaping,
// and a query of printable bytes) is set in dst, without the parser's
// allocation.
func requestURL(method, target string, dst *url.URL) (*url.URL, error) {
	if plainTarget(target) {
		path, query, hasQuery := strings.Cut(target, "?")
		*dst = url.URL{Path: path, RawQuery: query}
		if hasQuery && query == "" && strings.Count(target, "?") == 1 {
			dst.ForceQuery = true
		}
		return dst, nil
	}
	authority := method == http.MethodConnect && !strings.HasPrefix(target, "/")
	raw := target
	if authority {
		raw = "http://" + target
	}
	u, err := url.ParseRequestURI(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: bad request target: %v", ErrFraming, err)
	}
	if authority {
		u.Scheme = ""
	}
	return u, nil
}

// plainTarget reports whether target is an origin-form target whose
// path url.ParseRequestURI takes as it is (no byte it would unescape or
// escape) and whose query has only printable ASCII bytes.
func plainTarget(target string) bool {
	if target == "" || target[0] != '/' {
		return false
	}
	inQuery := false
	for i := 0; i < len(target); i++ {
		c := target[i]
		switch {
		case c <= ' ' || c >= 0x7f:
			return false
		case inQuery:
		case c == '?':
			inQuery = true
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~/$&+,:;=@", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// shouldClose reports whether the client wants the connection closed
// after this request (HTTP/1.0 unless it asks to keep it).
func shouldClose(minor int, conn []string) bool {
	if headerHasToken(conn, "close") {
		return true
	}
	return minor == 0 && !headerHasToken(conn, "keep-alive")
}

func (h *facts) field(l string) (string, string, error) {
	if l[0] == ' ' || l[0] == '\t' {
		return "", "", fmt.Errorf("%w: obs-fold", ErrFraming)
	}
	colon := strings.IndexByte(l, ':')
	if colon <= 0 {
		return "", "", fmt.Errorf("%w: header without colon", ErrFraming)
	}
	name := l[:colon]
	for i := 0; i < len(name); i++ {
		if !IsTokenChar(name[i]) {
			return "", "", fmt.Errorf("%w: bad header name %q", ErrFraming, name)
		}
	}
	value := strings.Trim(l[colon+1:], " \t")
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return "", "", fmt.Errorf("%w: control byte in %s", ErrFraming, name)
		}
	}
	key := textproto.CanonicalMIMEHeaderKey(name)
	switch key {
	case "Content-Length":
		if h.clen >= 0 {
			return "", "", fmt.Errorf("%w: duplicate Content-Length", ErrFraming)
		}
		n, err := parseContentLength(value)
		if err != nil {
			return "", "", err
		}
		h.clen = n
	case "Transfer-Encoding":
		if h.chunked || !strings.EqualFold(value, "chunked") {
			return "", "", fmt.Errorf("%w: Transfer-Encoding %q", ErrFraming, value)
		}
		h.chunked = true
	case "Host":
		if h.hasHost {
			return "", "", fmt.Errorf("%w: duplicate Host", ErrFraming)
		}
		h.hasHost, h.host = true, value
	}
	if h.chunked && h.clen >= 0 {
		return "", "", fmt.Errorf("%w: both Content-Length and Transfer-Encoding", ErrFraming)
	}
	return key, value, nil
}

func parseContentLength(v string) (int64, error) {
	if len(v) == 0 || len(v) > 18 {
		return 0, fmt.Errorf("%w: bad Content-Length", ErrFraming)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: bad Content-Length %q", ErrFraming, v)
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: bad Content-Length", ErrFraming)
	}
	return n, nil
}

// ReadRequest reads one request with a strictly checked head, at most
// max bytes of it. Its body reads from br exactly as framed; the caller
// must drain or discard the connection before the next request. A
// request that cannot be framed unambiguously is an ErrFraming, a head
// over max an ErrHeadTooLarge.
func ReadRequest[S any](br *bufio.Reader, max int) (*http.Request, *Head[S], error) {
	s, err := readHead(br, max)
	if err != nil {
		return nil, nil, err
	}
	req, h, err := parseHead[S](s)
	if err != nil {
		return nil, nil, err
	}
	if req.ProtoMinor == 1 && !h.hasHost {
		return nil, nil, fmt.Errorf("%w: HTTP/1.1 request without Host", ErrFraming)
	}
	if req.ProtoMinor == 0 && h.chunked {
		// RFC 9112 6.1: faulty framing in an HTTP/1.0 message.
		return nil, nil, fmt.Errorf("%w: Transfer-Encoding in an HTTP/1.0 request", ErrFraming)
	}
	switch {
	case h.chunked:
		req.ContentLength = -1
		req.TransferEncoding = []string{"chunked"}
		req.Body = &chunkedBody{r: httputil.NewChunkedReader(br), br: br}
	case h.clen > 0:
		req.ContentLength = h.clen
		req.Body = &lenBody{r: io.LimitReader(br, h.clen), left: h.clen}
	default:
		req.ContentLength = 0
		req.Body = http.NoBody
	}
	return req, h, nil
}

// bodyDone reports whether a request body was read to its end.
type bodyDone interface{ done() bool }

// Done reports whether body, one ReadRequest made, was read to its end
// (false for any other body).
func Done(body io.Reader) bool {
	d, ok := body.(bodyDone)
	return ok && d.done()
}

type lenBody struct {
	r    io.Reader
	left int64
}

func (b *lenBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if err == io.EOF && b.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}
func (b *lenBody) Close() error { return nil }
func (b *lenBody) done() bool   { return b.left == 0 }

// chunkedBody decodes a chunked body and consumes its trailer section.
type chunkedBody struct {
	r   io.Reader
	br  *bufio.Reader
	end bool
	err error
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	if err == io.EOF {
		// readTrailer's io.EOF is the end of a well-formed trailer
		// section: the body is complete.
		if terr := b.readTrailer(); terr == io.EOF {
			b.end = true
		} else {
			err = terr
		}
	} else if err != nil {
		err = fmt.Errorf("%w: bad chunking: %v", ErrFraming, err)
	}
	b.err = err
	return n, err
}

func (b *chunkedBody) readTrailer() error {
	for range 64 {
		line, err := b.br.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("%w: trailer: %v", ErrFraming, err)
		}
		if !bytes.HasSuffix(line, []byte("\r\n")) {
			return fmt.Errorf("%w: trailer line not ended by CRLF", ErrFraming)
		}
		if len(line) == 2 {
			return io.EOF
		}
		// A field as net/http takes one: a token name, a value without
		// control characters, no obs-fold.
		if line[0] == ' ' || line[0] == '\t' {
			return fmt.Errorf("%w: bad trailer", ErrFraming)
		}
		if _, _, ok := upField(string(line[:len(line)-2])); !ok {
			return fmt.Errorf("%w: bad trailer", ErrFraming)
		}
	}
	return fmt.Errorf("%w: too many trailer fields", ErrFraming)
}

func (b *chunkedBody) Close() error { return nil }
func (b *chunkedBody) done() bool   { return b.end }

// Drain reads what is left of a request body, up to limit bytes; it
// reports whether the body is now complete so the connection can carry
// another request.
func Drain(body io.ReadCloser, limit int64) bool {
	if body == nil || body == http.NoBody {
		return true
	}
	d, ok := body.(bodyDone)
	if !ok {
		return false
	}
	if d.done() {
		return true
	}
	io.Copy(io.Discard, io.LimitReader(body, limit))
	return d.done()
}

// WriteRefusal writes a refusal (or any response the front end makes
// itself) to c in one buffered write with a short deadline.
func WriteRefusal(c net.Conn, resp *http.Response, head bool) error {
	bw := getWriter(&deadlineWriter{c: c, d: 5 * time.Second})
	defer putWriter(bw)
	if err := writeResponse(bw, resp, head); err != nil {
		return err
	}
	return bw.Flush()
}

// writeResponse writes resp to w as HTTP/1.1 with explicit framing.
func writeResponse(w io.Writer, resp *http.Response, head bool) error {
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
	if head || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
		resp.TransferEncoding = nil
	} else if resp.ContentLength < 0 && resp.StatusCode != http.StatusSwitchingProtocols {
		resp.TransferEncoding = []string{"chunked"}
	}
	return resp.Write(w)
}

// deadlineWriter gives every write a deadline.
type deadlineWriter struct {
	c net.Conn
	d time.Duration
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.c.SetWriteDeadline(time.Now().Add(w.d))
	return w.c.Write(p)
}

var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 16<<10) }}

func getWriter(w io.Writer) *bufio.Writer {
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(w)
	return bw
}

func putWriter(bw *bufio.Writer) {
	bw.Reset(nil)
	writerPool.Put(bw)
}
