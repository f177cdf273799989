package proxy

import (
	"cmp"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"airlock/policies"
	"airlock/proxy/internal/h1"
)

// Headers that tell the agent why a request was refused.
const (
	HeaderRequestID = "X-Airlock-Request-Id"
	HeaderCategory  = "X-Airlock-Category"
	HeaderRule      = "X-Airlock-Rule"
)

// reject is the one place a verdict becomes an HTTP refusal: a short plain
// body and headers naming the category, the rule and the request id — and
// no internal addresses.
func reject(req *http.Request, id string, status int, v policies.Verdict) *http.Response {
	cat := v.Category
	if cat == "" {
		cat = "none"
	}
	body := fmt.Sprintf("airlock: %s by rule %s (category %s)", strings.ToLower(http.StatusText(status)), v.Rule.Name, cat)
	if v.Reason != "" {
		body += ": " + v.Reason
	}
	body += "\nrequest id: " + id + "\n"
	h := http.Header{}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderRequestID, id)
	h.Set(HeaderCategory, cat)
	h.Set(HeaderRule, v.Rule.Name)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Connection", "close")
	return &http.Response{
		StatusCode: status, Status: fmt.Sprintf("%d %s", status, cmp.Or(refusalPhrase(status, v.Reason), http.StatusText(status))),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)),
		Close: true, Request: req,
	}
}

// maxPhrase bounds the reason phrase of a refusal's status line.
const maxPhrase = 200

// refusalPhrase is the reason phrase of a refusal's status line: the
// standard text and the reason, for clients that print a refused
// download's status line and never its body (npm, pnpm, yarn berry);
// empty when there is no reason to add.
func refusalPhrase(status int, reason string) string {
	if reason == "" {
		return ""
	}
	s := http.StatusText(status) + " (airlock: " + reason
	if len(s) > maxPhrase-1 {
		s = s[:maxPhrase-4] + "..."
	}
	return h1.VisibleASCII(s + ")")
}

// Phrase is the reason phrase of the exchange's status line (h1.Phraser):
// a refusal's says why.
func (x *exch) Phrase(code int) string {
	if !x.ev.refused || code != x.ev.e.HTTP.Status {
		return ""
	}
	return refusalPhrase(code, x.ev.e.Reason)
}

var _ h1.Phraser = (*exch)(nil)

// writeTLSAlert sends a fatal access_denied alert: the refusal for a TLS
// connection the proxy cannot or will not decrypt.
func writeTLSAlert(c net.Conn) {
	c.Write([]byte{21, 3, 3, 0, 2, 2, 49})
}
