package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/elazarl/goproxy"

	"airlock/audit"
	"airlock/policies"
)

// Decider is a sandbox's policy (*policies.Policy and *policies.Bound
// satisfy it). Reach is the only answer to whether an address may be
// dialed for a verdict (Invariant 7); the proxy never widens it.
type Decider interface {
	Decide(policies.Request) policies.Verdict
	Reach(netip.Addr, policies.Verdict) policies.AddrDecision
}

// Sandbox is what the proxy needs to know about the client of a connection.
type Sandbox struct {
	ID     string
	Policy Decider
	// Tenant is the principal the sandbox belongs to: artifacts of a
	// private registry category are cached for it alone ("": the
	// sandbox alone).
	Tenant string
	// Lock is the lockfiles the sandbox was created with: in every
	// registries category, the versions they do not list are hidden and
	// denied (not_in_lockfile) and artifacts must match their digests,
	// as a category's own lockfiles do. Nil: none.
	Lock *policies.LockSet
}

// Identifier attributes a connection to a sandbox by its source address.
// The serve wiring owns the registry; an unknown source is denied.
type Identifier interface {
	Identify(src netip.Addr) (Sandbox, bool)
}

// IdentifierFunc adapts a function to Identifier.
type IdentifierFunc func(netip.Addr) (Sandbox, bool)

// Identify calls f.
func (f IdentifierFunc) Identify(a netip.Addr) (Sandbox, bool) { return f(a) }

// Resolver is the appliance's resolver (net.Resolver satisfies it).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Bindings reports the names a sandbox resolved to an address through dnsd.
type Bindings interface {
	NamesFor(sandboxID string, addr netip.Addr) []string
}

// Placeholder is a sentinel value handed to a sandbox in place of a secret.
type Placeholder struct {
	Name  string // the secret's name
	Value string // the placeholder the sandbox holds
}

// Secrets holds real secret values and the placeholders given to sandboxes.
type Secrets interface {
	// Lookup returns the real value of the named secret for a sandbox.
	Lookup(sandboxID, name string) (string, bool)
	// Placeholders returns the sentinels given to a sandbox.
	Placeholders(sandboxID string) []Placeholder
}

// Hold is a request waiting for a human decision (action = "ask").
type Hold struct {
	ID          string // the request or flow id
	Sandbox     string
	Destination string // host:port, method and path when known
	Verdict     policies.Verdict
}

// Approver decides held requests. Ask blocks until a decision or ctx ends;
// an error or ctx ending means deny.
type Approver interface {
	Ask(ctx context.Context, h Hold) (approved bool, err error)
}

// ProxyAuthenticator maps explicit-proxy credentials to a sandbox (for
// clients outside sandboxes).
type ProxyAuthenticator interface {
	Authenticate(user, password string) (Sandbox, bool)
}

// Config configures a Proxy. Required: CA, Identify, Resolver, Emitter.
// Nil optional hooks default to the safe behaviour.
type Config struct {
	CA       LeafSource // the appliance CA (certs.CA)
	Identify Identifier
	Resolver Resolver
	Emitter  audit.Emitter
	Logger   *slog.Logger

	Bindings Bindings // nil: names are never learned from DNS bindings
	Secrets  Secrets  // nil: every injection fails (502), no placeholders
	Approver Approver // nil: every ask is denied
	// Attributor names the process behind each connection in its records
	// (exec_id, pid); nil: records carry no attribution.
	Attributor Attributor
	// ProxyAuth identifies explicit-proxy clients outside sandboxes by
	// their proxy credentials (Proxy-Authorization: Basic) when Identify
	// does not know their source address. Nil: such clients are denied.
	ProxyAuth ProxyAuthenticator
	// Advisories is the malicious-package denylist the package gate
	// applies to every registries category. Nil: none.
	Advisories Advisories
	// PackageCache is the shared verified cache of package artifacts
	// and rewritten metadata. Nil: no cache.
	PackageCache *PackageCache

	// Own are the appliance's own listener addresses: a connection whose
	// original destination is one of them is a loop and is refused. (Which
	// addresses may be dialed is the sandbox policy's Reach, bound by the
	// serve wiring to the operator's upstream.allow and own addresses.)
	Own []netip.AddrPort
	// RootCAs verifies upstream servers; nil means the system roots.
	RootCAs *x509.CertPool
	// ExtraCAPEM are more trusted upstream CAs (added to RootCAs or the
	// system roots).
	ExtraCAPEM [][]byte

	SniffTimeout      time.Duration // first bytes from the client; default 3s
	ReadHeaderTimeout time.Duration // each request head; default 30s
	IdleTimeout       time.Duration // idle between requests; default 120s
	DialTimeout       time.Duration // upstream dial; default 10s
	AskTimeout        time.Duration // a held request; default 2m
	MaxHeaderBytes    int           // request head; default 64 KiB
	MaxIdlePerHost    int           // upstream idle pool per host; default 256
}

// LeafSource mints certificates for inspected names.
type LeafSource interface {
	Leaf(name string) (*tls.Certificate, error)
}

// Proxy is the egress proxy. It is safe for concurrent use.
type Proxy struct {
	cfg   Config
	log   *slog.Logger
	roots *x509.CertPool

	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	spliced   map[*splicedConn]struct{} // live spliced tunnels, for Redecide
	closed    bool
	wg        sync.WaitGroup

	transports sync.Map               // sandbox id -> *upstream
	sessions   tls.ClientSessionCache // upstream TLS sessions, for resumption
	// engine is the goproxy server every HTTP request goes through.
	engine   *goproxy.ProxyHttpServer
	limiters limiters
	times    versionCache // package versions the gate read lately

	// testDial replaces the upstream dialer in tests (records every dial).
	testDial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// New validates cfg and returns a Proxy.
func New(cfg Config) (*Proxy, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	roots, err := upstreamRoots(cfg.RootCAs, cfg.ExtraCAPEM)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		cfg: cfg, log: cfg.Logger, roots: roots, ctx: ctx, cancel: cancel,
		listeners: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{},
		sessions: tls.NewLRUClientSessionCache(1024),
	}
	p.engine = p.newEngine()
	return p, nil
}

func (c *Config) validate() error {
	var errs []error
	if c.CA == nil {
		errs = append(errs, errors.New("the CA is required"))
	}
	if c.Identify == nil {
		errs = append(errs, errors.New("an Identify hook is required"))
	}
	if c.Resolver == nil {
		errs = append(errs, errors.New("a Resolver is required"))
	}
	if c.Emitter == nil {
		errs = append(errs, errors.New("an Emitter is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("proxy: config: %w", err)
	}
	return nil
}

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	setDur(&c.SniffTimeout, 3*time.Second)
	setDur(&c.ReadHeaderTimeout, 30*time.Second)
	setDur(&c.IdleTimeout, 120*time.Second)
	setDur(&c.DialTimeout, 10*time.Second)
	setDur(&c.AskTimeout, 2*time.Minute)
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = 64 << 10
	}
	if c.MaxIdlePerHost <= 0 {
		c.MaxIdlePerHost = 256
	}
}

func setDur(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

func upstreamRoots(base *x509.CertPool, extra [][]byte) (*x509.CertPool, error) {
	pool := base
	if pool == nil {
		sys, err := x509.SystemCertPool()
		if err != nil {
			return nil, fmt.Errorf("proxy: system roots: %w", err)
		}
		pool = sys
	} else {
		pool = pool.Clone()
	}
	for i, pem := range extra {
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("proxy: ExtraCAPEM[%d]: no certificate", i)
		}
	}
	return pool, nil
}

// Close stops every listener and connection. It is safe to call more than
// once and after a partial start.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.cancel()
	for ln := range p.listeners {
		ln.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	for s := range p.spliced {
		s.f.gate.Close() // the relay owns these sockets: closing c does not reach them
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.transports.Range(func(_, v any) bool {
		v.(interface{ CloseIdleConnections() }).CloseIdleConnections()
		return true
	})
	return nil
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	p.wg.Done()
}
