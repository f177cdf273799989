package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/audit"
	"airlock/certs"
	"airlock/policies"
	"airlock/proxy/internal/nettest"
)

// The test world: HTTPS and HTTP origins on loopback with their own CA, a
// fake resolver mapping *.example.test names to them, and a policy that
// names the world's hosts. Loopback is non-public to the classifier; the
// world is reachable only through the operator's allow-range the policy
// is bound to (worldOperator, a lab setting).

var worldNames = []string{
	"git.example.test", "api.staging.example.test", "hooks.example.test",
	"registry.example.test", "docs.example.test", "splice.example.test",
	"plain.example.test", "ask.example.test", "other.example.test",
	"rebind.example.test", "meta.example.test", "mapped.example.test",
	"own.example.test", "bad.example.test", "denied.example.test",
}

const (
	secretValue = "real-secret-value-1234"
	placeholder = "AIRLOCK-PLACEHOLDER-staging-token-5678"
	testOwnAddr = "198.18.0.1"
)

// worldOperator is the appliance settings the world's policies are bound
// to: loopback (the world) is an upstream allow-range, testOwnAddr is the
// appliance's own address.
var worldOperator = policies.Operator{
	Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
	Own:   []netip.Addr{netip.MustParseAddr(testOwnAddr)},
}

type seenReq struct {
	Method, Host, Path, Query, Auth, XToken string
	URI                                     string // the request target as sent
	Body                                    string
	Header                                  http.Header
}

type world struct {
	t         testing.TB
	roots     *x509.CertPool
	caPEM     []byte
	tlsPort   uint16 // trusted HTTPS origin on 127.0.0.1 (h2 and HTTP/1.1)
	h1Port    uint16 // the same origin offering only HTTP/1.1 (like bench/proxy's)
	badPort   uint16 // HTTPS origin with a certificate nobody trusts
	plainPort uint16 // HTTP origin

	trickle chan struct{} // lets /trickle and /hold send the rest of their bodies

	mu   sync.Mutex
	seen []seenReq
}

func newWorld(t testing.TB) *world {
	t.Helper()
	w := &world{t: t, trickle: make(chan struct{}, 1)}
	caTmpl, caCert, caKey, caDER := testCA(t, "world test CA")
	w.roots = x509.NewCertPool()
	w.roots.AddCert(caCert)
	w.caPEM = pemCert(caDER)
	good := leafFor(t, caCert, caKey, worldNames)
	selfKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	bad := leafFor(t, caTmpl, selfKey, worldNames) // signed by a key nobody trusts

	w.tlsPort = w.serve(&tls.Config{Certificates: []tls.Certificate{good}, NextProtos: []string{"h2", "http/1.1"}})
	w.h1Port = w.serve(&tls.Config{Certificates: []tls.Certificate{good}, NextProtos: []string{"http/1.1"}})
	w.badPort = w.serve(&tls.Config{Certificates: []tls.Certificate{bad}})
	w.plainPort = w.serve(nil)
	return w
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// serve starts an origin on 127.0.0.1 (TLS when conf is set).
func (w *world) serve(conf *tls.Config) uint16 {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		w.t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(w.handle), ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: log.New(io.Discard, "", 0)} // expected handshake failures (the untrusted origin)
	if conf != nil {
		srv.TLSConfig = conf
		go srv.ServeTLS(ln, "", "")
	} else {
		go srv.Serve(ln)
	}
	w.t.Cleanup(func() { srv.Close() })
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

func (w *world) handle(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 2<<20))
	w.mu.Lock()
	w.seen = append(w.seen, seenReq{Method: r.Method, Host: r.Host, Path: r.URL.Path, Query: r.URL.RawQuery, URI: r.RequestURI,
		Auth: r.Header.Get("Authorization"), XToken: r.Header.Get("X-Token"), Body: string(body), Header: r.Header.Clone()})
	w.mu.Unlock()
	if strings.HasPrefix(r.URL.Path, "/echo/") {
		echoBack(rw, r, body) // reflect_test.go
		return
	}
	if r.URL.Path == "/ws" && strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		// Not a real WebSocket: enough of the upgrade to test the proxy's
		// handling (101, then bytes echoed both ways).
		c, brw, err := http.NewResponseController(rw).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		line, _ := brw.ReadString('\n')
		io.WriteString(c, "echo: "+line)
		return
	}
	if r.URL.Path == "/drop" {
		// A response that keeps the connection by its headers, then the
		// server closes it anyway (as servers do to idle connections).
		c, brw, err := http.NewResponseController(rw).Hijack()
		if err != nil {
			return
		}
		brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\ndropped")
		brw.Flush()
		c.Close()
		return
	}
	if r.URL.Path == "/stream" {
		// No length: chunked, flushed in the middle, with a trailer.
		rw.Header().Set("Trailer", "X-Sum")
		io.WriteString(rw, "part one, ")
		http.NewResponseController(rw).Flush()
		io.WriteString(rw, "part two")
		rw.Header().Set("X-Sum", "2 parts")
		return
	}
	if r.URL.Path == "/random" {
		// A body whose every byte matters (records reordered, dropped
		// or repeated show), in writes of odd sizes.
		b := randomBody()
		rw.Header().Set("Content-Length", strconv.Itoa(len(b)))
		for len(b) > 0 {
			n := min(len(b), 50_000)
			rw.Write(b[:n])
			b = b[n:]
		}
		return
	}
	if r.URL.Path == "/trickle" {
		// A body of known length whose first bytes come alone: the rest
		// only once the test saw them arrive (or after 10 s).
		rw.Header().Set("Content-Length", "100000")
		rw.Write(bytes.Repeat([]byte("t"), 1000))
		http.NewResponseController(rw).Flush()
		select {
		case <-w.trickle:
		case <-time.After(10 * time.Second):
		}
		rw.Write(bytes.Repeat([]byte("u"), 99000))
		return
	}
	if r.URL.Path == "/hold" {
		// No length: a first chunk alone, the rest only once the test
		// lets it go (or after 10 s).
		io.WriteString(rw, "first part")
		http.NewResponseController(rw).Flush()
		select {
		case <-w.trickle:
		case <-time.After(10 * time.Second):
		}
		io.WriteString(rw, "second part")
		return
	}
	if r.URL.Path == "/big" {
		rw.Header().Set("Content-Length", "1048576")
		rw.Write(make([]byte, 1<<20))
		return
	}
	rw.Header().Set("X-Origin-Proto", r.Proto)
	fmt.Fprintf(rw, "origin %s %s %s", r.Method, r.Host, r.URL.Path)
}

func (w *world) requests() []seenReq {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]seenReq(nil), w.seen...)
}

func (w *world) reset() {
	w.mu.Lock()
	w.seen = nil
	w.mu.Unlock()
}

// fakeResolver maps names to addresses; anything else does not exist.
type fakeResolver map[string][]netip.Addr

func (r fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[strings.ToLower(host)]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// recorder collects audit events.
type recorder struct {
	mu     sync.Mutex
	events []audit.Event
}

func (r *recorder) Emit(e audit.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) all() []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]audit.Event(nil), r.events...)
}

// waitFor returns the first event matching ok, waiting (bounded) for it.
func (r *recorder) waitFor(t testing.TB, what string, ok func(audit.Event) bool) audit.Event {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, e := range r.all() {
			if ok(e) {
				return e
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no event: %s; events:\n%s", what, r.dump())
	return audit.Event{}
}

func (r *recorder) dump() string {
	var b strings.Builder
	for _, e := range r.all() {
		j, _ := json.Marshal(e)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// dialLog records every upstream dial and refuses anything but the world.
type dialLog struct {
	mu    sync.Mutex
	addrs []string
}

func (d *dialLog) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.addrs = append(d.addrs, addr)
	d.mu.Unlock()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || ap.Addr() != netip.MustParseAddr("127.0.0.1") {
		return nil, fmt.Errorf("test world: refusing to dial %s", addr)
	}
	return dialAddr(ctx, 10*time.Second, ap) // the proxy's own dialer
}

func (d *dialLog) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.addrs...)
}

// env is a proxy in front of the world.
type env struct {
	t        testing.TB
	w        *world
	p        *Proxy
	ca       *certs.CA
	ev       *recorder
	dials    *dialLog
	explicit string // explicit listener address
	tln      net.Listener
	origDst  sync.Map // client local addr -> netip.AddrPort
	policy   *policies.Bound
	approver Approver
	secrets  *testSecrets
}

type testSecrets struct{}

func (testSecrets) Lookup(sb, name string) (string, bool) {
	if sb == "sb1" && name == "staging-token" {
		return secretValue, true
	}
	return "", false
}

func (testSecrets) Placeholders(sb string) []Placeholder {
	return []Placeholder{{Name: "staging-token", Value: placeholder}}
}

const testPolicy = `version = 1
mode = "enforce"

[deny]
cidrs = ["169.254.169.254/32"]

[categories.git]
hosts = ["git.example.test"]
ports = [TLSPORT]
push = false

[categories.internal_api]
hosts = ["api.staging.example.test"]
ports = [TLSPORT]
routes = [{ methods = ["GET", "POST"], path = "/v1/items/*" }]
inject = { header = "Authorization", secret = "staging-token", format = "Bearer {}" }
sentinels = ["staging-token"]
sentinel_headers = ["X-Token"]

[categories.webhooks]
hosts = ["hooks.example.test"]
ports = [TLSPORT]
methods = ["POST"]
paths = ["/hook/a"]
max_body = 1024
rate = "3/hour"

[categories.registries]
hosts = ["registry.example.test"]
ports = [TLSPORT]

[categories.docs]
kind = "public_web"
hosts = ["docs.example.test", "rebind.example.test", "meta.example.test", "mapped.example.test", "own.example.test", "bad.example.test"]
methods = ["GET", "HEAD", "POST"]
ports = [TLSPORT, BADPORT, H1PORT]

[categories.tunnel]
kind = "public_web"
hosts = ["splice.example.test"]
ports = [TLSPORT]
inspect = false

[categories.plain]
kind = "public_web"
hosts = ["plain.example.test"]
methods = ["GET", "POST"]
http = true
ports = [PLAINPORT]

[categories.held]
kind = "public_web"
hosts = ["ask.example.test"]
ports = [TLSPORT]
action = "ask"
`

type envOpt func(*Config)

// policy fills the world's ports into a policy source.
func (w *world) policy(src string) string {
	return strings.NewReplacer("TLSPORT", fmt.Sprint(w.tlsPort), "BADPORT", fmt.Sprint(w.badPort),
		"H1PORT", fmt.Sprint(w.h1Port), "PLAINPORT", fmt.Sprint(w.plainPort)).Replace(src)
}

func newEnv(t testing.TB, opts ...envOpt) *env {
	t.Helper()
	w := newWorld(t)
	src := w.policy(testPolicy)
	parsed, err := policies.Parse("test.toml", []byte(src))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	pol := policies.Bind(parsed, worldOperator)
	ca, err := certs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	res := fakeResolver{}
	for _, n := range worldNames {
		res[n] = []netip.Addr{lo}
	}
	res["rebind.example.test"] = []netip.Addr{netip.MustParseAddr("10.0.0.5")}
	res["meta.example.test"] = []netip.Addr{netip.MustParseAddr("169.254.169.254")}
	res["mapped.example.test"] = []netip.Addr{netip.MustParseAddr("::ffff:127.0.0.1")}
	res["own.example.test"] = []netip.Addr{netip.MustParseAddr(testOwnAddr)}
	e := &env{t: t, w: w, ca: ca, ev: &recorder{}, dials: &dialLog{}, policy: pol, secrets: &testSecrets{}}
	cfg := Config{
		CA: ca,
		Identify: IdentifierFunc(func(a netip.Addr) (Sandbox, bool) {
			if a == lo {
				return Sandbox{ID: "sb1", Policy: pol}, true
			}
			return Sandbox{}, false
		}),
		Resolver:     res,
		Emitter:      e.ev,
		Secrets:      e.secrets,
		ExtraCAPEM:   [][]byte{w.caPEM},
		RootCAs:      x509.NewCertPool(),
		SniffTimeout: 300 * time.Millisecond,
		AskTimeout:   300 * time.Millisecond,
		Approver:     ApproverFunc(func(ctx context.Context, h Hold) (bool, error) { return e.approve(ctx, h) }),
	}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.testDial = e.dials.dial
	e.p = p
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.explicit = ln.Addr().String()
	go p.ServeExplicit(ln)
	// As the appliance's listeners: no TCP keep-alive probes.
	lc := net.ListenConfig{KeepAlive: -1}
	tln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.tln = tln
	go e.acceptTransparent()
	t.Cleanup(func() { tln.Close(); p.Close() })
	return e
}

func (e *env) approve(ctx context.Context, h Hold) (bool, error) {
	if e.approver == nil {
		<-ctx.Done()
		return false, ctx.Err()
	}
	return e.approver.Ask(ctx, h)
}

// ApproverFunc adapts a function to Approver (tests).
type ApproverFunc func(context.Context, Hold) (bool, error)

func (f ApproverFunc) Ask(ctx context.Context, h Hold) (bool, error) { return f(ctx, h) }

// acceptTransparent plays the kernel path: each accepted connection is
// handed to HandleTransparent with the original destination the test
// client registered for its source port.
func (e *env) acceptTransparent() {
	for {
		c, err := e.tln.Accept()
		if err != nil {
			return
		}
		go func() {
			key := c.RemoteAddr().String()
			var dst netip.AddrPort
			for range 200 {
				if v, ok := e.origDst.Load(key); ok {
					dst = v.(netip.AddrPort)
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			e.p.HandleTransparent(context.Background(), c, dst)
		}()
	}
}

// dialTransparent connects "to" dst through the transparent path.
func (e *env) dialTransparent(dst netip.AddrPort) net.Conn {
	e.t.Helper()
	return e.dialTransparentFrom(dst, "127.0.0.1")
}

func (e *env) dialTransparentFrom(dst netip.AddrPort, src string) net.Conn {
	e.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", e.tln.Addr().String())
	if err != nil {
		e.t.Fatal(err)
	}
	e.origDst.Store(c.LocalAddr().String(), dst)
	e.t.Cleanup(func() { c.Close() })
	return c
}

func (e *env) worldDst() netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), e.w.tlsPort)
}

func (e *env) clientRoots() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.ca.CertPEM())
	return pool
}

// transparentClient is an HTTPS client whose every connection goes
// through the transparent path to dst, trusting the appliance CA.
func (e *env) transparentClient(dst netip.AddrPort, h2 bool) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return e.dialTransparent(dst), nil
		},
		TLSClientConfig:   &tls.Config{RootCAs: e.clientRoots()},
		ForceAttemptHTTP2: h2,
		DisableKeepAlives: false,
	}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// explicitClient is an HTTP_PROXY-style client of the explicit listener.
func (e *env) explicitClient() *http.Client {
	tr := &http.Transport{
		Proxy:           func(*http.Request) (*url.URL, error) { return url.Parse("http://" + e.explicit) },
		TLSClientConfig: &tls.Config{RootCAs: e.clientRoots()},
	}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func (e *env) url(host, path string) string {
	return fmt.Sprintf("https://%s:%d%s", host, e.w.tlsPort, path)
}

// rawExchange writes raw bytes on c and reads one response.
func rawExchange(t testing.TB, c net.Conn, raw string) *http.Response {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading response to %q: %v", raw, err)
	}
	resp.Body = io.NopCloser(strings.NewReader(readAll(resp.Body)))
	return resp
}

func readAll(r io.Reader) string {
	b, _ := io.ReadAll(r)
	return string(b)
}

// tlsThroughTransparent opens a TLS connection via the transparent path.
func (e *env) tlsThroughTransparent(dst netip.AddrPort, sni string) (*tls.Conn, error) {
	c := e.dialTransparent(dst)
	tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: e.clientRoots(), NextProtos: []string{"http/1.1"}})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	return tc, tc.Handshake()
}

// connectTunnel opens an explicit CONNECT tunnel and returns the conn
// after a 200, or the refusal response.
func (e *env) connectTunnel(authority string) (net.Conn, *http.Response) {
	e.t.Helper()
	c, err := net.DialTimeout("tcp", e.explicit, 5*time.Second)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil {
		e.t.Fatalf("CONNECT %s: %v", authority, err)
	}
	if resp.StatusCode != 200 {
		return nil, resp
	}
	return &bufConn{Conn: c, br: br}, resp
}

func isDeny(rule string) func(audit.Event) bool {
	return func(e audit.Event) bool {
		return e.Verdict == "deny" && strings.HasPrefix(e.Rule, rule)
	}
}

type contextT = context.Context

type discardEmitter struct{}

func (discardEmitter) Emit(audit.Event) {}

// testCA and leafFor are nettest's CA and Leaf.
var (
	testCA  = nettest.CA
	leafFor = nettest.Leaf
)
