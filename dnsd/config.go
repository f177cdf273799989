package dnsd

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"time"

	"airlock/audit"
	"airlock/policies"
)

// Policy is what dnsd needs from a compiled policy (*policies.Policy and
// *policies.Bound satisfy it). Reach alone decides which answer addresses
// a sandbox may be given (Invariant 7); dnsd never widens it.
// Implementations must be comparable (a pointer): the policy value is part
// of the cache key, so no answer shaped for one policy is served to a
// sandbox under another.
type Policy interface {
	Decide(policies.Request) policies.Verdict
	Reach(netip.Addr, policies.Verdict) policies.AddrDecision
	DNS() policies.DNSConfig
}

// Sandbox is what the serve wiring knows about the sender of a query.
type Sandbox struct {
	ID     string
	Policy Policy
	// IPv6 is true when the sandbox has an IPv6 path; without it AAAA
	// answers come back empty.
	IPv6 bool
}

// Identifier maps a query's source address to its sandbox.
type Identifier interface {
	Identify(src netip.Addr) (Sandbox, bool)
}

// IdentifierFunc adapts a function to Identifier.
type IdentifierFunc func(src netip.Addr) (Sandbox, bool)

// Identify calls f(src).
func (f IdentifierFunc) Identify(src netip.Addr) (Sandbox, bool) { return f(src) }

// Upstream is one resolver dnsd forwards to.
type Upstream struct {
	Addr string // host:port (an IP literal; dnsd never resolves upstream names)
	// TLS, when set, makes this a DNS-over-TLS upstream.
	TLS *tls.Config
}

func (u Upstream) String() string {
	if u.TLS != nil {
		return "tls://" + u.Addr
	}
	return u.Addr
}

// ParseUpstream parses "ip:port", "ip" (port 53) or "tls://ip:port" (port
// 853 when omitted; the server name for verification comes from
// "tls://ip:port#name").
func ParseUpstream(s string) (Upstream, error) {
	var u Upstream
	rest, isTLS := strings.CutPrefix(s, "tls://")
	name := ""
	if isTLS {
		rest, name, _ = strings.Cut(rest, "#")
	}
	port := "53"
	if isTLS {
		port = "853"
	}
	ap, err := netip.ParseAddrPort(rest)
	if err != nil {
		a, err2 := netip.ParseAddr(rest)
		if err2 != nil {
			return u, fmt.Errorf("upstream %q: want ip:port: %w", s, err)
		}
		rest = net.JoinHostPort(a.String(), port)
		ap = netip.MustParseAddrPort(rest)
	}
	u.Addr = ap.String()
	if isTLS {
		u.TLS = &tls.Config{ServerName: name, MinVersion: tls.VersionTLS12}
		if name == "" {
			u.TLS.ServerName = ap.Addr().String()
		}
	}
	return u, nil
}

// Config configures a Server. Zero values take the documented defaults.
type Config struct {
	// Listen are addresses served on both UDP and TCP ("127.0.0.1:0" works;
	// the bound addresses are in Server.Addrs).
	Listen []string
	// PacketConns and Listeners are pre-opened sockets to serve too, such as
	// the transparent ones (internal/tproxy) that the bpf SOCKMAP holds.
	PacketConns []net.PacketConn
	Listeners   []net.Listener
	// UDPSockets is how many SO_REUSEPORT UDP sockets each Listen address
	// gets (default GOMAXPROCS, at least 2).
	UDPSockets int

	Identifier Identifier    // required
	Emitter    audit.Emitter // required; one event per query
	Logger     *slog.Logger  // default: discard
	// Attributor names the process behind each query in its event
	// (exec_id, pid); nil: events carry no attribution.
	Attributor Attributor

	// Upstreams are used for policies whose [dns] names none.
	Upstreams []Upstream

	Timeout        time.Duration // whole forward budget per query (default 2s); SERVFAIL after it
	AttemptTimeout time.Duration // one upstream attempt (default 700ms)

	CacheSize   int           // entries (default 100000); negative disables caching
	MinTTL      time.Duration // cache clamp (default 5s)
	MaxTTL      time.Duration // cache clamp (default 1h)
	NegativeTTL time.Duration // negative answers without SOA; also the cap for negatives (default 60s)
	AnswerTTL   time.Duration // TTL cap in answers given to sandboxes (default 300s)

	BindingsSize  int           // ledger entries (default 200000)
	BindingsGrace time.Duration // how long a binding outlives its TTL (default 2m)

	TCPReadTimeout time.Duration // default 2s
	TCPIdleTimeout time.Duration // default 8s
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.UDPSockets <= 0 {
		c.UDPSockets = max(2, runtime.GOMAXPROCS(0))
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	def(&c.Timeout, 2*time.Second)
	def(&c.AttemptTimeout, 700*time.Millisecond)
	if c.CacheSize == 0 {
		c.CacheSize = 100000
	}
	def(&c.MinTTL, 5*time.Second)
	def(&c.MaxTTL, time.Hour)
	def(&c.NegativeTTL, 60*time.Second)
	def(&c.AnswerTTL, 300*time.Second)
	if c.BindingsSize <= 0 {
		c.BindingsSize = 200000
	}
	def(&c.BindingsGrace, 2*time.Minute)
	def(&c.TCPReadTimeout, 2*time.Second)
	def(&c.TCPIdleTimeout, 8*time.Second)
}

func (c *Config) validate() error {
	if c.Identifier == nil {
		return errors.New("dnsd: config: Identifier is required")
	}
	if c.Emitter == nil {
		return errors.New("dnsd: config: Emitter is required")
	}
	if c.MinTTL > c.MaxTTL {
		return fmt.Errorf("dnsd: config: MinTTL %v above MaxTTL %v", c.MinTTL, c.MaxTTL)
	}
	if c.AttemptTimeout > c.Timeout {
		c.AttemptTimeout = c.Timeout
	}
	for _, u := range c.Upstreams {
		if _, err := netip.ParseAddrPort(u.Addr); err != nil {
			return fmt.Errorf("dnsd: config: upstream %q: %w", u.Addr, err)
		}
	}
	return nil
}
