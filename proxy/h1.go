package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"
)

// errFraming marks a request whose framing is ambiguous or malformed: it
// gets 400 and is never forwarded.
var errFraming = errors.New("ambiguous or malformed request framing")

// errHeadTooLarge marks a request head over the limit.
var errHeadTooLarge = errors.New("request head too large")

// rawHead is what the strict head scanner learned.
type rawHead struct {
	bytes   []byte
	host    string // the Host header ("" when absent)
	hasHost bool
	clen    int64 // -1 when absent
	chunked bool
}

// readHead reads one request head (request line and header fields up to
// the empty line), at most max bytes, and checks its framing strictly:
// CRLF line ends only, no obs-fold, no control bytes, at most one
// Content-Length (digits only), Transfer-Encoding only as a single
// "chunked", never both, at most one Host.
func readHead(br *bufio.Reader, max int) (*rawHead, error) {
	h := &rawHead{clen: -1}
	var buf []byte
	first := true
	for {
		line, err := br.ReadSlice('\n')
		if len(buf)+len(line) > max || errors.Is(err, bufio.ErrBufferFull) {
			return nil, errHeadTooLarge
		}
		if err != nil {
			if len(buf) == 0 && len(line) == 0 {
				return nil, err
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		buf = append(buf, line...)
		if !bytes.HasSuffix(line, []byte("\r\n")) {
			return nil, fmt.Errorf("%w: line not ended by CRLF", errFraming)
		}
		content := line[:len(line)-2]
		if first {
			first = false
			if err := checkRequestLine(content); err != nil {
				return nil, err
			}
			continue
		}
		if len(content) == 0 {
			h.bytes = buf
			return h, nil
		}
		if err := h.field(content); err != nil {
			return nil, err
		}
	}
}

func checkRequestLine(l []byte) error {
	parts := bytes.Split(l, []byte(" "))
	if len(parts) != 3 || len(parts[0]) == 0 || len(parts[1]) == 0 {
		return fmt.Errorf("%w: bad request line", errFraming)
	}
	for _, c := range parts[0] {
		if !isTokenChar(c) {
			return fmt.Errorf("%w: bad method", errFraming)
		}
	}
	for _, c := range parts[1] {
		if c <= ' ' || c == 0x7f {
			return fmt.Errorf("%w: bad request target", errFraming)
		}
	}
	if v := string(parts[2]); v != "HTTP/1.1" && v != "HTTP/1.0" {
		return fmt.Errorf("%w: unsupported version %q", errFraming, v)
	}
	return nil
}

func (h *rawHead) field(l []byte) error {
	if l[0] == ' ' || l[0] == '\t' {
		return fmt.Errorf("%w: obs-fold", errFraming)
	}
	colon := bytes.IndexByte(l, ':')
	if colon <= 0 {
		return fmt.Errorf("%w: header without colon", errFraming)
	}
	name := l[:colon]
	for _, c := range name {
		if !isTokenChar(c) {
			return fmt.Errorf("%w: bad header name %q", errFraming, name)
		}
	}
	value := bytes.Trim(l[colon+1:], " \t")
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return fmt.Errorf("%w: control byte in %s", errFraming, name)
		}
	}
	switch strings.ToLower(string(name)) {
	case "content-length":
		if h.clen >= 0 {
			return fmt.Errorf("%w: duplicate Content-Length", errFraming)
		}
		n, err := parseContentLength(value)
		if err != nil {
			return err
		}
		h.clen = n
	case "transfer-encoding":
		if h.chunked || !strings.EqualFold(string(value), "chunked") {
			return fmt.Errorf("%w: Transfer-Encoding %q", errFraming, value)
		}
		h.chunked = true
	case "host":
		if h.hasHost {
			return fmt.Errorf("%w: duplicate Host", errFraming)
		}
		h.hasHost, h.host = true, string(value)
	}
	if h.chunked && h.clen >= 0 {
		return fmt.Errorf("%w: both Content-Length and Transfer-Encoding", errFraming)
	}
	return nil
}

func parseContentLength(v []byte) (int64, error) {
	if len(v) == 0 || len(v) > 18 {
		return 0, fmt.Errorf("%w: bad Content-Length", errFraming)
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: bad Content-Length %q", errFraming, v)
		}
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: bad Content-Length", errFraming)
	}
	return n, nil
}

// readRequest reads one request with a strictly checked head. Its body
// reads from br exactly as framed; the caller must drain or discard the
// connection before the next request.
func readRequest(br *bufio.Reader, max int) (*http.Request, *rawHead, error) {
	h, err := readHead(br, max)
	if err != nil {
		return nil, nil, err
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(h.bytes)))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errFraming, err)
	}
	if req.ProtoMajor == 1 && req.ProtoMinor == 1 && !h.hasHost {
		return nil, nil, fmt.Errorf("%w: HTTP/1.1 request without Host", errFraming)
	}
	req.TransferEncoding = nil
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
		if terr := b.readTrailer(); terr != nil {
			err = terr
		} else {
			b.end = true
		}
	} else if err != nil {
		err = fmt.Errorf("%w: bad chunking: %v", errFraming, err)
	}
	b.err = err
	return n, err
}

func (b *chunkedBody) readTrailer() error {
	for range 64 {
		line, err := b.br.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("%w: trailer: %v", errFraming, err)
		}
		if !bytes.HasSuffix(line, []byte("\r\n")) {
			return fmt.Errorf("%w: trailer line not ended by CRLF", errFraming)
		}
		if len(line) == 2 {
			return io.EOF
		}
		if line[0] == ' ' || line[0] == '\t' || bytes.IndexByte(line, ':') <= 0 {
			return fmt.Errorf("%w: bad trailer", errFraming)
		}
	}
	return fmt.Errorf("%w: too many trailer fields", errFraming)
}

func (b *chunkedBody) Close() error { return nil }
func (b *chunkedBody) done() bool   { return b.end }

// drain reads what is left of a request body, up to limit bytes; it
// reports whether the body is now complete so the connection can carry
// another request.
func drain(body io.ReadCloser, limit int64) bool {
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

// writeRefusal writes a refusal (or any response the front end makes
// itself) to c in one buffered write with a short deadline.
func writeRefusal(c net.Conn, resp *http.Response, head bool) error {
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
