package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
)

// readUpResponse reads an upstream response head. The common shape — the
// whole head already received, CRLF lines, a single Content-Length or
// "chunked" without announced trailers, or no body — is parsed here in
// one pass with one allocation for the head; anything else is left to
// net/http's parser, which has not consumed a byte by then.
func readUpResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if resp, ok := quickResponse(br, req); ok {
		return resp, nil
	}
	return http.ReadResponse(br, req)
}

func quickResponse(br *bufio.Reader, req *http.Request) (*http.Response, bool) {
	if _, err := br.Peek(1); err != nil {
		return nil, false // net/http reports it
	}
	b, _ := br.Peek(br.Buffered())
	end := bytes.Index(b, crlfcrlf)
	if end < 0 {
		return nil, false
	}
	s := string(b[:end+4])
	pr, framing, ok := parseUpHead(s)
	if !ok {
		return nil, false
	}
	resp := &pr.resp
	resp.Request = req
	noBody := req.Method == http.MethodHead ||
		resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	if framing.chunked {
		if framing.clen >= 0 || resp.Header["Trailer"] != nil || resp.ProtoMinor == 0 || noBody && req.Method != http.MethodHead {
			return nil, false
		}
		resp.ContentLength = -1
		resp.TransferEncoding = []string{"chunked"}
		delete(resp.Header, "Transfer-Encoding")
	}
	switch {
	case noBody:
		resp.Body = http.NoBody
		if req.Method != http.MethodHead {
			resp.ContentLength = 0
		}
	case framing.chunked:
		resp.Body = &chunkedBody{r: httputil.NewChunkedReader(br), br: br}
	case framing.clen == 0:
		resp.Body = http.NoBody
	case framing.clen > 0:
		pr.body = upLenBody{br: br, left: framing.clen, pr: pr}
		resp.Body = &pr.body
	default:
		resp.ContentLength = -1
		resp.Close = true
		resp.Body = io.NopCloser(br) // until the connection ends
	}
	br.Discard(end + 4)
	return resp, true
}

// parseUpHead parses a response head strictly; ok is false for anything
// unusual (net/http then parses it).
func parseUpHead(s string) (*parsedResp, facts, bool) {
	fr := facts{clen: -1}
	line, rest, _ := strings.Cut(s, "\r\n")
	for i := 0; i < len(line); i++ {
		if c := line[i]; c < ' ' || c == 0x7f {
			return nil, fr, false
		}
	}
	proto, status, _ := strings.Cut(line, " ")
	code, _, _ := strings.Cut(status, " ")
	minor := 1
	switch proto {
	case "HTTP/1.1":
	case "HTTP/1.0":
		minor = 0
	default:
		return nil, fr, false
	}
	n, err := strconv.Atoi(code)
	if len(code) != 3 || err != nil || n < 200 { // 1xx: rare, net/http's
		return nil, fr, false
	}
	nf := strings.Count(rest, "\r\n")
	// The response, the values of a typical head and a length-framed
	// body share one allocation.
	pr := &parsedResp{}
	hdr := make(http.Header, nf)
	vals := pr.vals[:]
	if nf > len(vals) {
		vals = make([]string, nf)
	}
	for i := 0; ; i++ {
		line, rest, _ = strings.Cut(rest, "\r\n")
		if line == "" {
			break
		}
		key, value, ok := upField(line)
		if !ok {
			return nil, fr, false
		}
		switch key {
		case "Content-Length":
			if fr.clen >= 0 {
				return nil, fr, false
			}
			if fr.clen, err = parseContentLength(value); err != nil {
				return nil, fr, false
			}
		case "Transfer-Encoding":
			if fr.chunked || !strings.EqualFold(value, "chunked") {
				return nil, fr, false
			}
			fr.chunked = true
		}
		if prev, ok := hdr[key]; ok {
			hdr[key] = append(prev, value)
		} else {
			vals[i] = value
			hdr[key] = vals[i : i+1 : i+1]
		}
	}
	resp := &pr.resp
	*resp = http.Response{
		Status: status, StatusCode: n, Proto: proto, ProtoMajor: 1, ProtoMinor: minor,
		Header: hdr, ContentLength: fr.clen,
		Close: shouldClose(minor, hdr["Connection"]),
	}
	if minor != 0 && headerHasToken(hdr["Connection"], "close") {
		delete(hdr, "Connection") // as net/http does, for HTTP/1.1 only
	}
	return pr, fr, true
}

// parsedResp holds what parseUpHead builds in one allocation.
type parsedResp struct {
	resp http.Response
	body upLenBody
	up   upBody // the upstream's wrapper of body
	vals [8]string
}

func upField(l string) (string, string, bool) {
	colon := strings.IndexByte(l, ':')
	if colon <= 0 {
		return "", "", false
	}
	name := l[:colon]
	for i := 0; i < len(name); i++ {
		if !IsTokenChar(name[i]) {
			return "", "", false
		}
	}
	value := strings.Trim(l[colon+1:], " \t")
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return "", "", false
		}
	}
	return textproto.CanonicalMIMEHeaderKey(name), value, true
}

// upLenBody is a response body of known length.
type upLenBody struct {
	br   *bufio.Reader
	left int64
	pr   *parsedResp // what it was allocated with
}

func (b *upLenBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= int64(n)
	if b.left == 0 {
		return n, io.EOF
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *upLenBody) Close() error { return nil }
