package proxy

import (
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"airlock/audit"
)

// Invariant 8: the sandbox never receives a real secret the proxy put
// into a request. A response to a request with an injected credential or
// a swapped placeholder is scanned — its header fields, its body as it
// streams (after undoing gzip or deflate) and its trailers — and every
// form of the value (raw, JSON-escaped, URL-escaped) is replaced by the
// sandbox's placeholder for it. What cannot be scanned is refused: a
// content coding other than gzip and deflate, a protocol switch, a value
// in a header's name; a body that stops decoding midway is cut off, never
// ended as if complete. Responses to requests without injection are not
// touched (one length check on the plain path).

// ruleReflect names the proxy's refusal of a response that would have
// carried an injected secret back to the sandbox.
const ruleReflect = "proxy.reflect"

// injection is a secret value the proxy put into a request, and what the
// sandbox may see in its place.
type injection struct {
	name, value, repl string
}

// injected is what a request with injected values carries for its
// response.
type injected struct {
	list []injection
	// aborted: the response body was cut off; the front end breaks the
	// response instead of ending it.
	aborted bool
}

// cutOff reports whether the response must be broken off (nil: no).
func (in *injected) cutOff() bool { return in != nil && in.aborted }

// addInjection records a value put into the request (once per value).
func (r *reqEvent) addInjection(name, value, repl string) {
	if value == "" {
		return
	}
	if r.inj == nil {
		r.inj = &injected{}
	}
	for _, in := range r.inj.list {
		if in.value == value {
			return
		}
	}
	r.inj.list = append(r.inj.list, injection{name: name, value: value, repl: repl})
}

// redacted is what replaces an injected credential the sandbox has no
// placeholder for.
func redacted(name string) string { return "airlock-redacted-" + name }

// replacementFor is the sandbox's placeholder for a secret, else redacted.
func (p *Proxy) replacementFor(sandboxID, name string) string {
	if p.cfg.Secrets != nil {
		for _, ph := range p.cfg.Secrets.Placeholders(sandboxID) {
			if ph.Name == name && ph.Value != "" {
				return ph.Value
			}
		}
	}
	return redacted(name)
}

// patternsFor lists each injected value in the forms a server may echo
// it: as sent, JSON-escaped and URL-escaped.
func patternsFor(inj []injection) []secretPattern {
	var out []secretPattern
	add := func(name, find, repl string) {
		for _, p := range out {
			if string(p.find) == find {
				return
			}
		}
		out = append(out, secretPattern{name: name, find: []byte(find), repl: []byte(repl)})
	}
	for _, in := range inj {
		add(in.name, in.value, in.repl)
		for _, esc := range []func(string) string{jsonEscape, jsonEscapeNoHTML, jsonEscapeSlash} {
			add(in.name, esc(in.value), esc(in.repl))
		}
		add(in.name, url.QueryEscape(in.value), url.QueryEscape(in.repl))
		add(in.name, url.PathEscape(in.value), url.PathEscape(in.repl))
	}
	return out
}

func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// jsonEscapeNoHTML is JSON without escaping <, > and & (most encoders).
func jsonEscapeNoHTML(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	out := strings.TrimSuffix(b.String(), "\n")
	return out[1 : len(out)-1]
}

// jsonEscapeSlash is JSON that also escapes '/' (PHP's default).
func jsonEscapeSlash(s string) string {
	return strings.ReplaceAll(jsonEscapeNoHTML(s), "/", `\/`)
}

// narrowForScan prepares a request with an injected value for a response
// the proxy can scan: only content codings it can undo, and no ranges (a
// value cut across two partial responses could not be found in either).
func narrowForScan(h http.Header) {
	h.Del("Range")
	h.Del("If-Range")
	var keep []string
	for _, f := range h.Values("Accept-Encoding") {
		for t := range strings.SplitSeq(f, ",") {
			c, _, _ := strings.Cut(t, ";")
			switch strings.ToLower(strings.TrimSpace(c)) {
			case "gzip", "x-gzip", "deflate", "identity":
				keep = append(keep, strings.TrimSpace(t))
			}
		}
	}
	h.Del("Accept-Encoding")
	if len(keep) > 0 {
		h.Set("Accept-Encoding", strings.Join(keep, ", "))
	}
}

// reflectScan is the scanning of one response.
type reflectScan struct {
	p    *Proxy
	x    *exch
	pats []secretPattern
}

// guardResponse scans a response to a request the proxy injected into:
// it replaces values in header fields and wraps the body. It returns the
// response to deliver, or the proxy's refusal.
func (p *Proxy) guardResponse(x *exch, resp *http.Response, req *http.Request) *http.Response {
	s := &reflectScan{p: p, x: x, pats: patternsFor(x.ev.inj.list)}
	if name, ok := s.headerNames(resp.Header); !ok {
		return s.refuse(resp, req, name, "header name", "a response header's name carries the secret")
	}
	if name, ok := s.headerNames(resp.Trailer); !ok {
		return s.refuse(resp, req, name, "trailer name", "an announced trailer's name carries the secret")
	}
	s.header(resp.Header, "header:")
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return s.refuse(resp, req, x.ev.inj.list[0].name, "upgrade", "a protocol switch cannot be scanned for the injected secret")
	}
	if !hasBody(resp, req) {
		return resp
	}
	codings, err := contentCodings(resp.Header)
	if err != nil {
		return s.refuse(resp, req, x.ev.inj.list[0].name, "body", err.Error())
	}
	b := &scannedBody{s: s, resp: resp, raw: resp.Body, codings: codings, buf: make([]byte, 32<<10)}
	b.m = newMatcher(s.pats, b.hit)
	resp.Body = b
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	if len(codings) > 0 {
		// Delivered decoded: the scanner's output is plain bytes.
		resp.Header.Del("Content-Encoding")
		resp.Uncompressed = true
	}
	return resp
}

func hasBody(resp *http.Response, req *http.Request) bool {
	return resp.Body != nil && resp.Body != http.NoBody && req.Method != http.MethodHead &&
		resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified
}

// contentCodings returns the response's codings to undo (gzip, deflate);
// any other, or more than one, is an error.
func contentCodings(h http.Header) ([]string, error) {
	var out []string
	for _, f := range h.Values("Content-Encoding") {
		for t := range strings.SplitSeq(f, ",") {
			switch c := strings.ToLower(strings.TrimSpace(t)); c {
			case "", "identity":
			case "gzip", "x-gzip", "deflate":
				out = append(out, c)
			default:
				return nil, fmt.Errorf("content coding %q cannot be scanned for the injected secret", c)
			}
		}
	}
	if len(out) > 1 {
		return nil, errors.New("more than one content coding cannot be scanned for the injected secret")
	}
	return out, nil
}

// headerNames reports false (and the secret) when a field name holds a
// value: a name cannot be rewritten safely.
func (s *reflectScan) headerNames(h http.Header) (string, bool) {
	for k := range h {
		if name := s.inName(k); name != "" {
			return name, false
		}
	}
	return "", true
}

// inName returns the secret whose value a field name holds, or "".
func (s *reflectScan) inName(k string) string {
	for _, pt := range s.pats {
		if strings.Contains(strings.ToLower(k), strings.ToLower(string(pt.find))) {
			return pt.name
		}
	}
	return ""
}

// trailerNames removes the late trailers (sent only with the body's end)
// whose name holds a value: the head is gone, so the field goes instead.
func (s *reflectScan) trailerNames(h http.Header) {
	for k := range h {
		if name := s.inName(k); name != "" {
			delete(h, k)
			s.emit(name, "trailer name", 0, 1, "removed")
		}
	}
}

// header replaces values in every field of h, one event per field.
func (s *reflectScan) header(h http.Header, pos string) {
	for k, vs := range h {
		for i, v := range vs {
			var names []string
			vs[i] = replaceAll(s.pats, v, func(name string, _ int64) { names = append(names, name) })
			slices.Sort(names)
			for j, name := range names {
				if j == 0 || names[j-1] != name {
					s.emit(name, pos+k, 0, countOf(names, name), "replaced")
				}
			}
		}
	}
}

func countOf(l []string, s string) int {
	n := 0
	for _, v := range l {
		if v == s {
			n++
		}
	}
	return n
}

// refuse answers the sandbox with the proxy's 502 instead of the response.
func (s *reflectScan) refuse(resp *http.Response, req *http.Request, name, pos, reason string) *http.Response {
	resp.Body.Close()
	s.emit(name, pos, 0, 0, "refused")
	d := internalDeny(ruleReflect, reason)
	d.Category = s.x.ev.e.Category
	return s.p.refuse(&s.x.ev, req, http.StatusBadGateway, d)
}

// emit logs a secret_reflected event: the secret's name (never its
// value), the host, where it was, how often, and what the proxy did.
func (s *reflectScan) emit(name, pos string, off int64, count int, action string) {
	x := s.x
	e := audit.New(audit.KindSecretReflected, x.ev.e.Sandbox)
	e.ID, e.Rule, e.Category = x.ev.e.ID, ruleReflect, x.ev.e.Category
	e.Reason = "the response carried an injected secret back; the sandbox got its placeholder"
	switch action {
	case "refused":
		e.Verdict = "deny"
		e.Reason = "the response could not be scanned or cleaned of an injected secret and was refused"
	case "removed":
		e.Reason = "a trailer's name carried an injected secret back; the trailer was removed"
	}
	e.SecretReflected = &audit.SecretReflected{Secret: name, Host: x.host, Position: pos, Offset: off, Count: count, Action: action}
	s.p.cfg.Emitter.Emit(e)
	s.p.log.Warn("proxy: secret reflected", "id", e.ID, "sandbox", e.Sandbox,
		"secret", name, "host", x.host, "position", pos, "action", action)
}

// scannedBody is a response body as the sandbox gets it: decoded, with
// every value replaced. A read error after the head was sent aborts the
// response (see injected.aborted), so a cut body never looks complete.
type scannedBody struct {
	s       *reflectScan
	resp    *http.Response
	raw     io.ReadCloser
	codings []string
	src     io.Reader // raw through the decoder, made at the first read
	m       *matcher
	buf     []byte
	out     []byte
	pos     int
	err     error

	hits   map[string]*bodyHit // by secret name
	logged bool
}

// bodyHit is where a secret was first replaced in a body, and how often.
type bodyHit struct {
	first int64
	n     int
}

func (b *scannedBody) hit(name string, off int64) {
	if b.hits == nil {
		b.hits = map[string]*bodyHit{}
	}
	h := b.hits[name]
	if h == nil {
		h = &bodyHit{first: off}
		b.hits[name] = h
	}
	h.n++
}

func (b *scannedBody) Read(p []byte) (int, error) {
	for b.pos == len(b.out) && b.err == nil {
		b.fill()
	}
	if b.pos < len(b.out) {
		n := copy(p, b.out[b.pos:])
		b.pos += n
		return n, nil
	}
	return 0, b.err
}

// fill reads one piece from upstream and releases what it can of it.
func (b *scannedBody) fill() {
	if b.src == nil {
		if b.src, b.err = b.decoder(); b.err != nil {
			b.fail(b.err)
			return
		}
	}
	n, err := b.src.Read(b.buf)
	final := err == io.EOF
	b.out, b.pos = b.m.feed(b.out[:0], b.buf[:n], final), 0
	switch {
	case final:
		b.end()
		b.err = io.EOF
	case err != nil:
		b.fail(err)
	}
}

func (b *scannedBody) decoder() (io.Reader, error) {
	if len(b.codings) == 0 {
		return b.raw, nil
	}
	var (
		r   io.Reader
		err error
	)
	if b.codings[0] == "deflate" {
		r, err = zlib.NewReader(b.raw)
	} else {
		r, err = gzip.NewReader(b.raw)
	}
	if err != nil {
		return nil, fmt.Errorf("decoding the %s response body: %w", b.codings[0], err)
	}
	return r, nil
}

// end scans the trailers (read with the body's end) and logs the body's
// replacements.
func (b *scannedBody) end() {
	if len(b.resp.Trailer) > 0 {
		b.s.trailerNames(b.resp.Trailer)
		b.s.header(b.resp.Trailer, "trailer:")
	}
	b.log()
}

func (b *scannedBody) log() {
	if b.logged {
		return
	}
	b.logged = true
	names := make([]string, 0, len(b.hits))
	for n := range b.hits {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		b.s.emit(n, "body", b.hits[n].first, b.hits[n].n, "replaced")
	}
}

// fail cuts the response off: what was released stays released, the rest
// never comes, and the client sees a broken response, not a short one.
func (b *scannedBody) fail(err error) {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) || errors.Is(err, zlib.ErrChecksum) || errors.Is(err, zlib.ErrHeader) {
		err = fmt.Errorf("response body cut off or not %s: %w", strings.Join(b.codings, ""), err)
	}
	b.err = err
	b.s.x.ev.inj.aborted = true
	b.s.p.log.Warn("proxy: response aborted", "id", b.s.x.ev.e.ID, "sandbox", b.s.x.ev.e.Sandbox, "err", err)
}

func (b *scannedBody) Close() error {
	b.log()
	return b.raw.Close()
}
