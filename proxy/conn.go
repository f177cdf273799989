package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"airlock/policies"
	"airlock/proxy/internal/h1"
	"airlock/proxy/internal/rawio"
)

// maxBindingNames bounds how many dnsd-learned names are tried for an
// address.
const maxBindingNames = 8

// HandleTransparent serves one connection the kernel path steered to the
// proxy; origDst is where the sandbox was connecting. It returns when the
// connection is done and always closes c.
func (p *Proxy) HandleTransparent(ctx context.Context, c net.Conn, origDst netip.AddrPort) {
	origDst = netip.AddrPortFrom(origDst.Addr().Unmap(), origDst.Port())
	f := &flow{id: newID(), mode: modeTransparent, origDst: origDst, port: origDst.Port(), start: time.Now()}
	p.handle(ctx, c, f, func(cc net.Conn) closeReason {
		if p.isLoop(origDst) {
			p.denyFlow(f, cc, internalDeny(ruleLoop, "the destination is the appliance's own listener"), false)
			return reasonDenied
		}
		return p.transparent(ctx, f, cc)
	})
}

// HandleExplicit serves one HTTP proxy client connection.
func (p *Proxy) HandleExplicit(ctx context.Context, c net.Conn) {
	f := &flow{id: newID(), mode: modeExplicit, start: time.Now()}
	p.handle(ctx, c, f, func(cc net.Conn) closeReason { return p.explicit(ctx, f, cc) })
}

// handle does what every connection shares: tracking, identity, byte
// counting, and the close record.
func (p *Proxy) handle(ctx context.Context, c net.Conn, f *flow, serve func(net.Conn) closeReason) {
	if !p.track(c) {
		c.Close()
		return
	}
	defer p.untrack(c)
	defer c.Close()
	f.src, _ = addrPort(c.RemoteAddr())
	cc := &countConn{Conn: c, f: f}
	sb, ok := p.cfg.Identify.Identify(f.src.Addr())
	if (!ok || sb.Policy == nil) && f.mode == modeExplicit && p.cfg.ProxyAuth != nil {
		f.sb = Sandbox{}
		p.emitClose(f, p.explicitAuth(ctx, f, cc))
		return
	}
	if !ok || sb.Policy == nil {
		f.sb = Sandbox{ID: ""}
		p.denyFlow(f, cc, internalDeny(ruleIdentity, "unknown source address"), false)
		p.emitClose(f, reasonDenied)
		return
	}
	f.sb = sb
	p.attribute(f, c)
	reason := serve(cc)
	p.emitClose(f, reason)
}

// refuseFlow records a connection-level denial: the flow's verdict, no
// handling, and its decision record. The caller then tells the client
// in the flow's protocol.
func (p *Proxy) refuseFlow(f *flow, v policies.Verdict) {
	f.verdict = v
	f.handling = handleNone
	p.awaitOwner(f)
	p.emitDecision(f)
}

// denyFlow refuses the flow, with a TLS alert when the client spoke TLS.
func (p *Proxy) denyFlow(f *flow, c net.Conn, v policies.Verdict, alert bool) {
	p.refuseFlow(f, v)
	if alert {
		writeTLSAlert(c)
	}
}

func (p *Proxy) transparent(ctx context.Context, f *flow, c net.Conn) closeReason {
	s, err := p.sniff(c)
	if err != nil {
		if s.kind == sniffTLS {
			p.denyFlow(f, c, internalDeny(ruleProtocol, "malformed TLS ClientHello"), true)
			return reasonDenied
		}
		p.denyFlow(f, c, internalDeny(ruleProtocol, "could not read the first bytes"), false)
		return reasonClientError
	}
	switch s.kind {
	case sniffTLS:
		return p.handleTLS(ctx, f, s.conn, s.hello, "")
	case sniffHTTP:
		f.handling = handleInspect
		sc := p.newScope(f, "http", "", 0, true)
		return p.serveHTTP1(ctx, sc, s.conn, nil)
	}
	return p.opaque(ctx, f, s.conn, s.kind)
}

// handleTLS decides a TLS connection on its SNI (or, for explicit
// tunnels, the CONNECT authority, which the SNI must agree with), then
// inspects or splices it.
func (p *Proxy) handleTLS(ctx context.Context, f *flow, c net.Conn, h Hello, authority string) closeReason {
	f.sni = h.ServerName
	f.alpn = strings.Join(h.ALPN, ",")
	name := authority
	if authority != "" && h.ServerName != "" {
		sni, err := policies.NormalizeHost(h.ServerName)
		if err != nil || sni != authority {
			return p.tlsDeny(f, c, internalDeny(ruleFronting, "TLS server name differs from the CONNECT authority"), "")
		}
	}
	if name == "" && h.ServerName != "" {
		n, err := policies.NormalizeHost(h.ServerName)
		if err != nil {
			return p.tlsDeny(f, c, internalDeny(ruleProtocol, "bad TLS server name"), "")
		}
		name = n
	}
	var ok bool
	switch {
	case authority != "":
		ok = true // decided on the CONNECT authority already
	case name == "":
		name, ok = p.decideByAddress(ctx, f)
	default:
		ok = p.decideConnect(ctx, f, name)
	}
	if !ok {
		return p.tlsDeny(f, c, f.verdict, name)
	}
	if f.verdict.Cat != nil && f.verdict.Cat.Inspect && name != "" {
		return p.mitm(ctx, f, c, name, h)
	}
	return p.splice(ctx, f, c)
}

// decideConnect runs the connection-stage decision for name and, when
// allowed, resolves and checks the addresses to dial.
func (p *Proxy) decideConnect(ctx context.Context, f *flow, name string) bool {
	f.host = name
	req := policies.Request{Stage: policies.StageConnect, Host: name, SNI: f.sni, Port: f.port, Lock: f.sb.Lock}
	// The original address is not part of a named decision: it is never
	// dialed; the name's own addresses are checked when resolved.
	if a, err := netip.ParseAddr(name); err == nil {
		req.Host, req.IP = "", a
	}
	v := f.sb.Policy.Decide(req)
	if v.Action == policies.ActionAsk {
		v = p.ask(ctx, f, f.id, hostPort(name, f.port), v)
	}
	f.verdict = v
	if !v.Action.Allows() {
		return false
	}
	targets, addrs, err := p.resolveChecked(ctx, f.sb.Policy, name, f.port, v)
	if err != nil {
		f.verdict = addrDeny(v, err)
		return false
	}
	f.targets = targets
	if f.origDst.IsValid() && !slices.Contains(addrs, f.origDst.Addr()) {
		f.mismatch = true
		p.log.Info("proxy: original address is not among the name's addresses", "id", f.id, "sandbox", f.sb.ID, "host", name)
	}
	return true
}

// decideByAddress decides a transparent connection that named no host:
// an IP rule for the original address, else a name this sandbox resolved
// to that address through dnsd. It returns the name that was allowed ("" for an IP rule).
func (p *Proxy) decideByAddress(ctx context.Context, f *flow) (string, bool) {
	if !f.origDst.IsValid() {
		f.verdict = internalDeny(ruleSniff, "no destination name")
		return "", false
	}
	dst := f.origDst.Addr()
	v := f.sb.Policy.Decide(policies.Request{Stage: policies.StageConnect, IP: dst, Port: f.port, SNI: f.sni, Lock: f.sb.Lock})
	if v.Action.Allows() && p.mayDial(dst, v, f.sb.Policy) {
		f.verdict, f.targets = v, []netip.AddrPort{f.origDst}
		return "", true
	}
	first := v
	if p.cfg.Bindings != nil {
		names := p.cfg.Bindings.NamesFor(f.sb.ID, dst)
		for _, n := range names[:min(len(names), maxBindingNames)] {
			norm, err := policies.NormalizeHost(n)
			if err == nil && p.decideConnect(ctx, f, norm) {
				return norm, true
			}
		}
	}
	f.host = ""
	if first.Action.Allows() {
		first = addrDeny(first, errRefusedAddr)
	}
	f.verdict = first
	return "", false
}

// tlsDeny refuses a TLS connection. When the name is known, the proxy
// completes the handshake with its CA and answers 403 so the agent learns
// why; otherwise it sends a TLS alert.
func (p *Proxy) tlsDeny(f *flow, c net.Conn, v policies.Verdict, name string) closeReason {
	p.refuseFlow(f, v)
	if name == "" {
		writeTLSAlert(c)
		return reasonDenied
	}
	p.explainTLS(f, c, name)
	return reasonDenied
}

// opaque handles bytes that are neither TLS nor HTTP (or none at all):
// decided on the original address alone, spliced only when allowed.
func (p *Proxy) opaque(ctx context.Context, f *flow, c net.Conn, kind sniffKind) closeReason {
	_, ok := p.decideByAddress(ctx, f)
	if ok && f.verdict.Cat != nil && f.verdict.Cat.Inspect {
		f.verdict = internalDeny(ruleProtocol, "the category inspects traffic and this connection is neither TLS nor HTTP")
		ok = false
	}
	if !ok {
		if kind == sniffNone && f.verdict.Rule.Name == "" {
			f.verdict = internalDeny(ruleSniff, "nothing received before the sniff timeout")
		}
		p.refuseFlow(f, f.verdict)
		return reasonDenied
	}
	return p.splice(ctx, f, c)
}

func (p *Proxy) explicit(ctx context.Context, f *flow, c net.Conn) closeReason {
	br := getFirstReader(c)
	req, head, err := p.readFirst(c, br)
	if err != nil {
		putFirstReader(br)
		return p.badRequest(f, c, err)
	}
	return p.explicitRequest(ctx, f, c, br, req, head)
}

// firstReaders read an explicit client's first request. A CONNECT tunnel
// gives its reader back once the buffered bytes are handed on (most
// explicit connections are tunnels); a plain HTTP client keeps it.
var firstReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 16<<10) }}

func getFirstReader(c net.Conn) *bufio.Reader {
	br := firstReaders.Get().(*bufio.Reader)
	br.Reset(c)
	return br
}

func putFirstReader(br *bufio.Reader) {
	br.Reset(nil)
	firstReaders.Put(br)
}

func (p *Proxy) readFirst(c net.Conn, br *bufio.Reader) (*http.Request, *reqHead, error) {
	c.SetReadDeadline(time.Now().Add(p.cfg.ReadHeaderTimeout))
	defer c.SetReadDeadline(time.Time{})
	return h1.ReadRequest[reqSlot](br, p.cfg.MaxHeaderBytes)
}

// explicitAuth identifies a client outside the sandboxes by its proxy
// credentials, answering 407 when they are missing or wrong.
func (p *Proxy) explicitAuth(ctx context.Context, f *flow, c net.Conn) closeReason {
	br := getFirstReader(c)
	req, head, err := p.readFirst(c, br)
	if err != nil {
		putFirstReader(br)
		return p.badRequest(f, c, err)
	}
	user, pass, ok := parseProxyBasic(req.Header.Get("Proxy-Authorization"))
	var sb Sandbox
	if ok {
		sb, ok = p.cfg.ProxyAuth.Authenticate(user, pass)
	}
	if !ok || sb.Policy == nil {
		v := internalDeny(ruleIdentity, "unknown source address and no valid proxy credentials")
		p.refuseFlow(f, v)
		resp := reject(req, f.id, http.StatusProxyAuthRequired, v)
		resp.Header.Set("Proxy-Authenticate", `Basic realm="airlock"`)
		h1.WriteRefusal(c, resp, false)
		return reasonDenied
	}
	f.sb, f.byAuth = sb, true
	return p.explicitRequest(ctx, f, c, br, req, head)
}

func parseProxyBasic(h string) (user, pass string, ok bool) {
	scheme, enc, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "basic") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(raw), ":")
}

func (p *Proxy) explicitRequest(ctx context.Context, f *flow, c net.Conn, br *bufio.Reader, req *http.Request, head *reqHead) closeReason {
	if req.Method != http.MethodConnect {
		f.handling = handleInspect
		sc := p.newScope(f, "http", "", 0, false)
		return p.serveHTTP1(ctx, sc, &bufConn{Conn: c, br: br}, &firstReq{req, head})
	}
	return p.connect(ctx, f, c, br, req)
}

// connect handles a CONNECT request: decide the authority, answer 200,
// then sniff inside the tunnel.
func (p *Proxy) connect(ctx context.Context, f *flow, c net.Conn, br *bufio.Reader, req *http.Request) closeReason {
	host, port, err := splitAuthority(req.RequestURI, "https")
	if err != nil || !strings.Contains(req.RequestURI, ":") {
		v := internalDeny(ruleProtocol, "CONNECT needs host:port")
		return p.connectRefused(f, c, req, http.StatusBadRequest, v)
	}
	f.port = port
	if !p.decideConnect(ctx, f, host) {
		return p.connectRefused(f, c, req, http.StatusForbidden, f.verdict)
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return reasonClientError
	}
	// Hand on what the reader buffered and drop the reader: a tunnel may
	// stay open for hours.
	pre, _ := br.Peek(br.Buffered())
	tc := newPrefixConn(c, bytes.Clone(pre))
	putFirstReader(br)
	s, err := p.sniff(tc)
	if err != nil {
		if s.kind == sniffTLS {
			return p.tlsDeny(f, c, internalDeny(ruleProtocol, "malformed TLS ClientHello"), "")
		}
		return reasonClientError
	}
	switch s.kind {
	case sniffTLS:
		f.sni = s.hello.ServerName
		return p.handleTLS(ctx, f, s.conn, s.hello, host)
	case sniffHTTP:
		f.handling = handleInspect
		sc := p.newScope(f, "http", host, port, false)
		return p.serveHTTP1(ctx, sc, s.conn, nil)
	}
	if f.verdict.Cat != nil && f.verdict.Cat.Inspect {
		p.refuseFlow(f, internalDeny(ruleProtocol, "the category inspects traffic and this tunnel is neither TLS nor HTTP"))
		return reasonDenied
	}
	return p.splice(ctx, f, s.conn)
}

func (p *Proxy) connectRefused(f *flow, c net.Conn, req *http.Request, status int, v policies.Verdict) closeReason {
	p.refuseFlow(f, v)
	h1.WriteRefusal(c, reject(req, f.id, status, v), false)
	return reasonDenied
}

// badRequest answers an unreadable first request with 400 and logs it.
func (p *Proxy) badRequest(f *flow, c net.Conn, err error) closeReason {
	if errors.Is(err, io.EOF) || isTimeout(err) && !errors.Is(err, h1.ErrFraming) {
		p.refuseFlow(f, internalDeny(ruleSniff, "no request before the timeout"))
		return reasonClientError
	}
	status, v := framingVerdict(err)
	p.refuseFlow(f, v)
	h1.WriteRefusal(c, reject(nil, f.id, status, v), false)
	return reasonDenied
}

func framingVerdict(err error) (int, policies.Verdict) {
	if errors.Is(err, h1.ErrHeadTooLarge) {
		return http.StatusRequestHeaderFieldsTooLarge, internalDeny(ruleFraming, "request head too large")
	}
	return http.StatusBadRequest, internalDeny(ruleFraming, fmt.Sprint(err))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// bufConn reads through a bufio.Reader that may hold bytes already.
type bufConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.br.Read(p) }

// CloseWrite half-closes when the underlying connection can.
func (c *bufConn) CloseWrite() error {
	return rawio.CloseWrite(c.Conn)
}

// countConn counts the client's bytes into the flow.
type countConn struct {
	net.Conn
	f *flow
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.f.up.Add(int64(n))
	return n, err
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.f.down.Add(int64(n))
	return n, err
}

// CloseWrite half-closes when the underlying connection can.
func (c *countConn) CloseWrite() error {
	return rawio.CloseWrite(c.Conn)
}
