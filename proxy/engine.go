package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"slices"

	"github.com/elazarl/goproxy"

	"airlock/audit"
	"airlock/policies"
)

// exch is the state of one request, from the front end through the
// engine's handlers and back. It is the request's context (so the
// transport's dialer finds the checked addresses without another
// allocation) and the round tripper goproxy calls.
type exch struct {
	context.Context
	p          *Proxy
	sc         *scope
	ev         reqEvent
	hostHeader string
	abs        bool   // the client sent an absolute-form URL
	upgrade    string // "websocket" when the client asks for that upgrade
	v          policies.Verdict
	host       string
	port       uint16
	path       string // the request path in the policy's normal form, as forwarded (requestFacts)
	dt         dialTargets
	up         countReader // request body bytes sent upstream
	status     int
	pkg        policies.Package // the package the request fetches
	evPkg      audit.Package    // its event's copy
	gate       *gateState       // a metadata response the package gate rewrites
	verify     *verifySpec      // a download checked against its registry digest
	cacheScope string           // the package cache scope of the download ("" shared)
}

var _ goproxy.RoundTripper = (*exch)(nil)

// Value answers the dialer's question for the checked addresses.
func (x *exch) Value(k any) any {
	if _, ok := k.(dialTargetsKey); ok {
		return &x.dt
	}
	return x.Context.Value(k)
}

// newExch starts a request: it records what the client sent before the
// engine changes anything, and makes the URL absolute (goproxy serves
// only absolute-form requests; the target check uses what the client
// sent). x and xreq are storage for the exch and the engine's copy of
// the request (allocated with the request's head), or nil.
func (p *Proxy) newExch(ctx context.Context, sc *scope, req *http.Request, hostHeader string, x *exch, xreq *http.Request) (*exch, *http.Request) {
	if x == nil {
		x = new(exch)
	}
	*x = exch{Context: ctx, p: p, sc: sc, hostHeader: hostHeader}
	x.abs = req.URL.IsAbs() || req.URL.Host != ""
	if up := upgradeType(req.Header); up == "websocket" {
		x.upgrade = up
	}
	p.initReqEvent(&x.ev, sc.f, sc.scheme, req)
	if !req.URL.IsAbs() {
		req.URL.Scheme = sc.scheme
	}
	if xreq != nil {
		// A copy of WithContext's request (which does not outlive the
		// statement) into the storage: no allocation.
		*xreq = *req.WithContext(x)
		return x, xreq
	}
	return x, req.WithContext(x)
}

// newEngine builds the goproxy server every request the proxy forwards
// goes through: plain HTTP on an explicit or transparent connection, and
// HTTP/1.1 or HTTP/2 inside an inspected TLS tunnel. The front end
// (listeners, sniffing, CONNECT, the TLS handshake, the strict HTTP/1.1
// parser and h1.Writer, HTTP/2) hands each request, in absolute form, to
// its ServeHTTP. One request's pipeline is then:
//
//  1. serveRequest, Airlock's request handler: target, decide, limit,
//     prepare (see there). goproxy runs the request handlers in order
//     and stops at the first that answers.
//  2. goproxy calls the request's RoundTripper, exch.RoundTrip: the
//     sandbox's upstream, which dials only the checked addresses.
//  3. respond, Airlock's response handler, on every response (goproxy
//     runs the response handlers in order).
//  4. goproxy writes the response to the client's ResponseWriter: the
//     status and header fields (without Content-Length when a handler
//     replaced the body), announced and late trailers, a flush after
//     every write of a chunked or event-stream body, and after a 101
//     the WebSocket relay between the hijacked client connection and
//     the upstream's.
//
// goproxy's unsafe defaults are all replaced: its transport (which skips
// upstream TLS verification and honours proxy environment variables)
// cannot dial anything, its CONNECT dialers refuse, its MITM machinery
// and CA are never used (CONNECT never reaches it), and it keeps header
// fields as they are so that hop-by-hop handling stays Airlock's.
func (p *Proxy) newEngine() *goproxy.ProxyHttpServer {
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = engineLogger{p}
	gp.Verbose = false
	gp.KeepHeader = true // hop-by-hop handling is ours (prepare, respond)
	gp.KeepAcceptEncoding = true
	// The response writers start with an empty header; keeping it lets
	// the HTTP/1.1 writer reuse its header storage across responses.
	gp.KeepDestinationHeaders = true
	gp.Tr = &http.Transport{Proxy: nil, DialContext: refuseDial, TLSClientConfig: p.upstreamTLS()}
	gp.ConnectDial = func(string, string) (net.Conn, error) { return nil, errEngineDial }
	gp.ConnectDialWithReq = func(*http.Request, string, string) (net.Conn, error) { return nil, errEngineDial }
	gp.NonproxyHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "airlock: not a proxy request", http.StatusBadRequest)
	})
	gp.OnRequest().DoFunc(p.serveRequest)
	gp.OnResponse().DoFunc(p.respond)
	return gp
}

var errEngineDial = errors.New("proxy: the engine never dials by itself")

func refuseDial(context.Context, string, string) (net.Conn, error) { return nil, errEngineDial }

// engineLogger sends goproxy's own warnings to the proxy's logger.
type engineLogger struct{ p *Proxy }

func (l engineLogger) Printf(format string, v ...any) {
	l.p.log.Debug("proxy: engine", "msg", format, "args", v)
}

// exchOf returns the request's state; a request without it (which the
// front end never sends) is refused.
func exchOf(req *http.Request, ctx *goproxy.ProxyCtx) *exch {
	if x, ok := ctx.UserData.(*exch); ok {
		return x
	}
	x, _ := req.Context().(*exch)
	if x != nil {
		ctx.UserData = x
		ctx.RoundTripper = x
	}
	return x
}

// noExch answers a request the front end did not prepare.
func noExch(req *http.Request) *http.Response {
	return reject(req, newID(), http.StatusBadRequest, internalDeny(ruleProtocol, "not a request from the proxy's front end"))
}

// serveRequest is the request side of one request's pipeline, in order:
// where it goes, the policy's verdict and the addresses to dial, the
// category's limits, and the upstream request. The first step that
// refuses answers the request (goproxy then skips the round trip);
// otherwise goproxy sends the prepared request with x.RoundTrip and
// hands the response to respond (see newEngine).
func (p *Proxy) serveRequest(req *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	x := exchOf(req, ctx)
	if x == nil {
		return req, noExch(req)
	}
	if resp := p.checkTarget(x, req); resp != nil {
		return req, resp
	}
	if resp := p.decide(x, req); resp != nil {
		return req, resp
	}
	if resp := p.limit(&x.ev, req, x.v); resp != nil {
		return req, resp
	}
	req, resp := p.prepare(x, req)
	if resp == nil {
		resp = p.gateRequest(x, req)
	}
	return req, resp
}

// checkTarget works out where the request goes and refuses what may
// never be forwarded: another host than the connection's, fronting,
// TRACE.
func (p *Proxy) checkTarget(x *exch, req *http.Request) *http.Response {
	sc := x.sc
	host, port, v, ok := sc.target(x.abs, req.URL, x.hostHeader)
	x.ev.e.HTTP.Host = host
	if !ok {
		return p.refuse(&x.ev, req, statusFor(v), v)
	}
	if sc.pinFirst && sc.host == "" {
		sc.host, sc.port = host, port
		sc.f.host, sc.f.port = host, port
	}
	x.host, x.port = host, port
	switch req.Method {
	case "TRACE", "TRACK":
		return p.refuse(&x.ev, req, http.StatusForbidden, internalDeny(ruleTrace, "TRACE is refused"))
	case http.MethodConnect:
		return p.refuse(&x.ev, req, http.StatusBadRequest, internalDeny(ruleProtocol, "CONNECT is only a proxy connection's first request"))
	}
	return nil
}

// decide runs the sandbox's policy on the request (asking a human when
// the rule says so) and resolves and checks the addresses to dial.
func (p *Proxy) decide(x *exch, req *http.Request) *http.Response {
	f, sc, host, port := x.sc.f, x.sc, x.host, x.port
	pr := policies.Request{
		Stage: policies.StageHTTP, Host: host, Port: port, Method: req.Method, Scheme: sc.scheme,
		Path: x.ev.e.HTTP.Path, Query: req.URL.RawQuery, Lock: f.sb.Lock,
	}
	if resp := p.requestFacts(x, req, &pr); resp != nil {
		return resp
	}
	v := f.sb.Policy.Decide(pr)
	p.tagPackage(x, v, host, x.path)
	if v.Action == policies.ActionAsk {
		v = p.ask(x, f, x.ev.e.ID, req.Method+" "+sc.scheme+"://"+hostPort(host, port)+pr.Path, v)
	}
	if v.Cat != nil && v.Cat.LogQuery {
		x.ev.e.HTTP.Query = req.URL.RawQuery
	}
	if up := upgradeType(req.Header); up != "" {
		x.ev.e.HTTP.Upgrade = up
	}
	x.ev.setVerdictRule(v, sc.ruleString(v.Rule))
	x.v = v
	if !f.decided {
		f.verdict = v
		p.emitDecision(f)
	}
	if !v.Action.Allows() {
		return p.refuse(&x.ev, req, http.StatusForbidden, v)
	}
	targets := f.targets
	if sc.host == "" || targets == nil {
		var err error
		var addrs []netip.Addr
		targets, addrs, err = p.resolveChecked(x, f.sb.Policy, host, port, v)
		if err != nil {
			return p.refuse(&x.ev, req, http.StatusForbidden, addrDeny(v, err))
		}
		if sc.pinFirst {
			f.targets = targets
			f.mismatch = f.origDst.IsValid() && !slices.Contains(addrs, f.origDst.Addr())
		}
	}
	x.dt.addrs = targets
	return nil
}

// prepare turns the client's request into the upstream request: the
// approved name as URL host (so upstream TLS verifies that name),
// hop-by-hop headers removed, then placeholders swapped and the
// category's credential injected — after the Connection header was
// applied, so it cannot remove them — and a chunked body's start checked.
func (p *Proxy) prepare(x *exch, req *http.Request) (*http.Request, *http.Response) {
	f := x.sc.f
	if name := connectionGuarded(req.Header, x.v.Cat); name != "" {
		return req, p.refuseConnection(x, req, name)
	}
	p.outRequest(req, x.sc, x.host, x.port, x.upgrade)
	if resp := p.applySecrets(&x.ev, req, req, f.sb.ID, x.host, x.v); resp != nil {
		return req, resp
	}
	if resp := p.refuseInjectedUpgrade(x, req); resp != nil {
		return req, resp
	}
	if resp := p.prebuffer(&x.ev, req, req); resp != nil {
		return req, resp
	}
	if req.Body != nil && req.Body != http.NoBody {
		x.up.r = req.Body
		req.Body = struct {
			*countReader
			closer
		}{&x.up, closer{req.Body}}
	}
	if f.dialedAddr() == "" {
		// The flow's close record names the upstream address; learn it
		// once, from the first request that gets a connection.
		req = req.WithContext(httptrace.WithClientTrace(x, &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
			f.dialed.Store(ci.Conn.RemoteAddr().String())
		}}))
	}
	return req, nil
}

// closer closes a wrapped body.
type closer struct{ c interface{ Close() error } }

func (c closer) Close() error { return c.c.Close() }

// RoundTrip sends the prepared request through the sandbox's transport.
// An upstream failure becomes the proxy's 502 refusal, so goproxy always
// gets a response and the event names the failure.
func (x *exch) RoundTrip(req *http.Request, _ *goproxy.ProxyCtx) (*http.Response, error) {
	resp, err := x.sc.tr.roundTrip(req, x.dt.addrs, x.sc.f)
	if name, reason := x.ev.watch.result(); name != "" {
		// The body reached a placeholder: it stopped there, and the
		// request is refused whatever the upstream made of its part.
		if err == nil {
			resp.Body.Close()
		}
		return x.p.secretEgress(&x.ev, req, name, reason), nil
	}
	if err != nil {
		return x.p.upstreamError(&x.ev, req, err), nil
	}
	return resp, nil
}

// Upgraded writes the request's event when its connection is handed
// over after a 101 response (h1.Writer's Hijack).
func (x *exch) Upgraded() {
	x.p.finish(&x.ev, http.StatusSwitchingProtocols, x.up.n, 0)
}

// respond is the response side of the pipeline, for every response the
// client gets (refusals pass unchanged): it removes the upstream's
// hop-by-hop headers, lets a protocol switch through only when the client
// asked for a WebSocket, and scans what the upstream sends back for an
// injected secret.
func (p *Proxy) respond(resp *http.Response, ctx *goproxy.ProxyCtx) *http.Response {
	x, _ := ctx.UserData.(*exch)
	if x == nil || resp == nil || x.ev.refused {
		return resp
	}
	removeHopHeaders(resp.Header)
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if x.upgrade == "" || !resp.ProtoAtLeast(1, 1) {
			resp.Body.Close()
			return p.upstreamError(&x.ev, ctx.Req, errors.New("upstream switched protocols unasked"))
		}
		resp.Header.Set("Connection", "Upgrade")
		resp.Header.Set("Upgrade", x.upgrade)
	}
	x.status = resp.StatusCode
	if x.gate != nil {
		if resp = p.gateResponse(x, resp, ctx.Req); x.ev.refused {
			return resp
		}
	}
	if x.verify != nil {
		if resp = p.verifyResponse(x, resp); x.ev.refused {
			return resp
		}
	}
	if x.ev.inj != nil {
		return p.guardResponse(x, resp, ctx.Req)
	}
	return resp
}
