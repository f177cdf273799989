package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"airlock/audit"
	"airlock/internal/verdictlog"
	"airlock/policies"
)

// scope is where the requests of one client connection may go.
type scope struct {
	f      *flow
	scheme string // "https" inside an inspected tunnel, else "http"
	// host and port are the tunnel's normalized destination; every request
	// must name exactly it. host "" means an explicit proxy connection whose
	// absolute-form requests each name their own destination.
	host string
	port uint16
	// pinned: the first request of a transparent plain-HTTP connection
	// fixes host and port for the rest of the connection.
	pinFirst bool
	tr       *upstream // the sandbox's upstream

	// The upstream URL host and Host header of a fixed destination.
	urlHost, hostHead string
	// exactHost is a Host header that normalizes to exactly host and
	// port (the canonical one), checked once here so that a request
	// naming it byte for byte skips normalizing it again.
	exactHost string
	// rule caches the text of the rule that decided the last request.
	rule atomic.Pointer[ruleText]
}

// ruleText is a rule and its text.
type ruleText struct {
	r policies.Rule
	s string
}

// ruleString returns r's text, reusing the last one for a repeated rule.
func (sc *scope) ruleString(r policies.Rule) string {
	if c := sc.rule.Load(); c != nil && c.r == r {
		return c.s
	}
	c := &ruleText{r: r, s: r.String()}
	sc.rule.Store(c)
	return c.s
}

// newScope is the scope of a connection's requests. An HTTP/2 scope is
// shared by concurrent streams: nothing in it changes after this, except
// the destination a transparent plain-HTTP connection's first request
// pins (HTTP/1.1 only, one request at a time).
func (p *Proxy) newScope(f *flow, scheme, host string, port uint16, pinFirst bool) *scope {
	sc := &scope{f: f, scheme: scheme, host: host, port: port, pinFirst: pinFirst, tr: p.transportFor(f.sb.ID)}
	if host != "" {
		sc.setNames()
	}
	return sc
}

// setNames sets the upstream names of a fixed destination, and
// exactHost when the canonical Host header normalizes to exactly the
// scope's host and port.
func (sc *scope) setNames() {
	sc.urlHost, sc.hostHead = hostPort(sc.host, sc.port), authorityFor(sc.host, sc.port, sc.scheme)
	if h, pt, err := splitAuthority(sc.hostHead, sc.scheme); err == nil && h == sc.host && pt == sc.port {
		sc.exactHost = sc.hostHead
	}
}

// outNames returns the upstream URL host and Host header for host:port.
func (sc *scope) outNames(host string, port uint16) (string, string) {
	if sc.urlHost != "" && host == sc.host && port == sc.port {
		return sc.urlHost, sc.hostHead
	}
	return hostPort(host, port), authorityFor(host, port, sc.scheme)
}

// maxSwapBody bounds a request body buffered to swap sentinels.
const maxSwapBody = 1 << 20

// hopHeaders are removed from every forwarded request and response.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopHeaders deletes the hop-by-hop fields: the fixed ones (their
// names are canonical, as every key of h is) and those the Connection
// field lists.
func removeHopHeaders(h http.Header) {
	if len(h) == 0 {
		return
	}
	for _, f := range h["Connection"] {
		for name := range strings.SplitSeq(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		delete(h, name)
	}
}

// upgradeType returns the Upgrade protocol a request asks for, if it asks.
func upgradeType(h http.Header) string {
	for _, f := range h["Connection"] {
		for t := range strings.SplitSeq(f, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "upgrade") {
				return strings.ToLower(h.Get("Upgrade"))
			}
		}
	}
	return ""
}

// reqEvent accumulates one http event.
type reqEvent struct {
	e       audit.Event
	f       *flow // its records wait for the flow's attribution
	http    audit.HTTP
	start   time.Time
	done    bool
	refused bool // the response is the proxy's refusal
	// cut: the response body was cut off (a package artifact that did not
	// match its digest); the front end breaks the response so the client
	// never takes the part it got for the whole.
	cut bool
	// inj are the secret values put into the request: its response is
	// scanned for them (reflect.go); nil on the plain path, which so pays
	// one pointer for it.
	inj *injected
	// watch searches a body that could not be searched before it left
	// for placeholders (inject_body.go), or nil.
	watch *watchedBody
}

func (p *Proxy) newReqEvent(f *flow, scheme string, req *http.Request) *reqEvent {
	r := &reqEvent{}
	p.initReqEvent(r, f, scheme, req)
	return r
}

func (p *Proxy) initReqEvent(r *reqEvent, f *flow, scheme string, req *http.Request) {
	r.e = audit.New(audit.KindHTTP, f.sb.ID)
	r.e.ID = newID()
	r.http = audit.HTTP{Method: req.Method, Scheme: scheme, Path: req.URL.EscapedPath(), FlowID: f.id}
	r.e.HTTP = &r.http
	r.f = f
	r.start = time.Now()
}

func packageOf(pkg policies.Package) audit.Package {
	return audit.Package{Ecosystem: pkg.Ecosystem, Name: pkg.Name, Version: pkg.Version}
}

func (r *reqEvent) setVerdict(v policies.Verdict) { verdictFields(&r.e, v) }

// cutOff reports whether the response must be broken off.
func (r *reqEvent) cutOff() bool { return r.cut || r.inj.cutOff() }

// setVerdictRule is setVerdict with the rule's text already known.
func (r *reqEvent) setVerdictRule(v policies.Verdict, rule string) {
	r.e.Verdict = v.Action.String()
	r.e.Rule = rule
	r.e.Category = v.Category
	r.e.WouldDeny = v.WouldDeny
	r.e.Reason = v.Reason
}

// finish emits the event once. A request's event is finished by one
// goroutine at a time (the one serving it).
func (p *Proxy) finish(r *reqEvent, status int, up, down int64) {
	if r.done {
		return
	}
	r.done = true
	r.e.HTTP.Status = status
	r.e.HTTP.BytesUp, r.e.HTTP.BytesDown = up, down
	r.e.HTTP.DurationMS = time.Since(r.start).Milliseconds()
	p.emitFlow(r.f, r.e)
}

// refuse finishes the event as a denial and returns the refusal.
func (p *Proxy) refuse(r *reqEvent, req *http.Request, status int, v policies.Verdict) *http.Response {
	r.setVerdict(v)
	r.refused = true
	p.awaitOwner(r.f)
	p.log.Log(context.Background(), verdictlog.Level(v.Action, v.WouldDeny), "proxy: request refused", "id", r.e.ID, "sandbox", r.e.Sandbox, "rule", v.Rule.Name, "reason", v.Reason, "status", status)
	p.finish(r, status, 0, 0)
	return reject(req, r.e.ID, status, v)
}

// target works out and checks where a request wants to go; abs tells
// whether the client sent u in absolute form.
func (sc *scope) target(abs bool, u *url.URL, hostHeader string) (string, uint16, policies.Verdict, bool) {
	if !abs && sc.exactHost != "" && hostHeader == sc.exactHost {
		return sc.host, sc.port, policies.Verdict{}, true
	}
	authority := hostHeader
	if abs {
		if hostHeader != "" && !sameAuthority(hostHeader, u.Host, u.Scheme) {
			return "", 0, internalDeny(ruleFronting, "absolute-form URL and Host name different hosts"), false
		}
		authority = u.Host
		if sc.host == "" && !strings.EqualFold(u.Scheme, "http") {
			return "", 0, internalDeny(ruleProtocol, "only http:// URLs may be proxied; use CONNECT for https"), false
		}
	} else if sc.host == "" && !sc.pinFirst {
		return "", 0, internalDeny(ruleProtocol, "a proxy request needs an absolute-form URL"), false
	}
	host, port, err := splitAuthority(authority, sc.scheme)
	if err != nil {
		return "", 0, internalDeny(ruleProtocol, "bad Host: "+err.Error()), false
	}
	if sc.host != "" && (host != sc.host || port != sc.port) {
		return "", 0, internalDeny(ruleFronting, "request names a host other than the connection's"), false
	}
	return host, port, policies.Verdict{}, true
}

// splitAuthority normalizes "host[:port]", defaulting the port by scheme.
func splitAuthority(a, scheme string) (string, uint16, error) {
	if a == "" {
		return "", 0, errors.New("empty")
	}
	if strings.HasSuffix(a, ":") && (a[0] == '[' || strings.Count(a, ":") == 1) {
		return "", 0, errors.New("empty port")
	}
	host, portStr := a, ""
	if h, p, err := net.SplitHostPort(a); err == nil {
		host, portStr = h, p
	} else if strings.HasPrefix(a, "[") && strings.HasSuffix(a, "]") {
		host = a
	}
	port := uint16(80)
	if strings.EqualFold(scheme, "https") {
		port = 443
	}
	if portStr != "" {
		n, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil || n == 0 {
			return "", 0, fmt.Errorf("bad port %q", portStr)
		}
		port = uint16(n)
	}
	norm, err := policies.NormalizeHost(host)
	if err != nil {
		return "", 0, err
	}
	return norm, port, nil
}

func sameAuthority(a, b, scheme string) bool {
	h1, p1, err1 := splitAuthority(a, scheme)
	h2, p2, err2 := splitAuthority(b, scheme)
	return err1 == nil && err2 == nil && h1 == h2 && p1 == p2
}

func hostPort(host string, port uint16) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// maxPrebuffer is how much of a body of unknown length (chunked) is read
// and checked before anything is sent upstream: a malformed chunked body
// within it is refused without forwarding a byte.
const maxPrebuffer = 64 << 10

func (p *Proxy) prebuffer(ev *reqEvent, req, out *http.Request) *http.Response {
	if out.ContentLength >= 0 || out.Body == nil || out.Body == http.NoBody {
		return nil
	}
	buf := make([]byte, 0, 4096)
	for len(buf) <= maxPrebuffer {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := out.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			out.Body = io.NopCloser(bytes.NewReader(buf))
			out.ContentLength = int64(len(buf))
			out.TransferEncoding = nil
			return nil
		}
		if err != nil {
			return p.bodyError(ev, req, err)
		}
	}
	out.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), out.Body), out.Body}
	return nil
}

func (p *Proxy) bodyError(ev *reqEvent, req *http.Request, err error) *http.Response {
	if name, reason := ev.watch.result(); name != "" && errors.Is(err, errPlaceholderInBody) {
		return p.secretEgress(ev, req, name, reason)
	}
	v := internalDeny(ruleFraming, "bad request body: "+err.Error())
	status := http.StatusBadRequest
	if errors.Is(err, errBodyLimit) {
		v = internalDeny(ruleBodyLimit, "request body over the category's limit")
		status = http.StatusRequestEntityTooLarge
	}
	v.Category = ev.e.Category
	return p.refuse(ev, req, status, v)
}

func statusFor(v policies.Verdict) int {
	if v.Rule.Name == ruleProtocol || v.Rule.Name == ruleFraming {
		return http.StatusBadRequest
	}
	return http.StatusForbidden
}

// addrDeny turns a resolve/classify failure into a verdict that keeps
// the category that allowed the name.
func addrDeny(v policies.Verdict, err error) policies.Verdict {
	d := internalDeny(ruleResolve, "the name does not resolve")
	if errors.Is(err, errRefusedAddr) {
		d = internalDeny(ruleAddress, "the name resolves only to addresses the policy does not allow (private, loopback, link-local, metadata, [deny] cidrs, or the appliance's own)")
		if why := refusedWhy(err); why != "" {
			d.Reason += ": " + why
		}
	}
	d.Category, d.Kind = v.Category, v.Kind
	return d
}

// outRequest turns the client's request into the upstream request, in
// place: the approved name as URL host (so upstream TLS verifies that
// name), hop-by-hop headers removed (a WebSocket upgrade is kept), no
// Expect, and no Go default User-Agent.
func (p *Proxy) outRequest(out *http.Request, sc *scope, host string, port uint16, upgrade string) {
	out.RequestURI = ""
	out.URL.Scheme = sc.scheme
	out.URL.Host, out.Host = sc.outNames(host, port)
	out.Close = false
	upValue := ""
	if upgrade != "" {
		upValue = out.Header.Get("Upgrade")
	}
	removeHopHeaders(out.Header)
	if upgrade != "" {
		out.Header.Set("Connection", "Upgrade")
		out.Header.Set("Upgrade", upValue)
	}
	out.Header.Del("Expect")
	if out.ContentLength == 0 {
		out.Body = http.NoBody // a known-empty body, not "unknown length"
	}
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = nil // do not add Go's default
	}
}

func authorityFor(host string, port uint16, scheme string) string {
	if (scheme == "https" && port == 443) || (scheme == "http" && port == 80) {
		if strings.Contains(host, ":") {
			return "[" + host + "]"
		}
		return host
	}
	return hostPort(host, port)
}

func (p *Proxy) upstreamError(ev *reqEvent, req *http.Request, err error) *http.Response {
	var cve *tls.CertificateVerificationError
	reason := "upstream connection failed"
	if errors.As(err, &cve) {
		reason = "upstream certificate verification failed"
	}
	p.log.Warn("proxy: upstream", "id", ev.e.ID, "sandbox", ev.e.Sandbox, "err", err)
	v := internalDeny(ruleUpstream, reason)
	v.Category = ev.e.Category
	return p.refuse(ev, req, http.StatusBadGateway, v)
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	if c.r == nil {
		return 0, io.EOF
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// maxScanBody bounds the request bodies searched for placeholders going
// to the wrong host; larger bodies are not searched.
const maxScanBody = 64 << 10
