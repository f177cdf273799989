package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"airlock/policies"
)

// errRefusedAddr: every address of the name is refused by the classifier.
var errRefusedAddr = errors.New("refused address")

// resolveChecked resolves name once with the appliance's resolver,
// classifies every answer and returns the addresses the proxy may dial,
// in the resolver's order. An IP literal is its own answer.
func (p *Proxy) resolveChecked(ctx context.Context, pol Decider, name string, port uint16, v policies.Verdict) ([]netip.AddrPort, []netip.Addr, error) {
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
		addrs = []netip.Addr{a}
	} else {
		ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
		defer cancel()
		addrs, err = p.cfg.Resolver.LookupNetIP(ctx, "ip", name)
		if err != nil {
			return nil, nil, fmt.Errorf("resolve %s: %w", name, err)
		}
	}
	var out []netip.AddrPort
	var refused []policies.AddrDecision
	for _, a := range addrs {
		if d := pol.Reach(a, v); d.Allowed() {
			out = append(out, netip.AddrPortFrom(a, port))
		} else {
			refused = append(refused, d)
		}
	}
	if len(out) == 0 {
		return nil, addrs, &refusedError{name: name, refused: refused}
	}
	return out, addrs, nil
}

// refusedError: the policy's Reach refused every address of a name.
type refusedError struct {
	name    string
	refused []policies.AddrDecision
}

func (e *refusedError) Error() string {
	why := make([]string, len(e.refused))
	for i, d := range e.refused {
		why[i] = d.Reason()
	}
	return fmt.Sprintf("%v: %s has no address the policy allows: %s", errRefusedAddr, e.name, strings.Join(why, "; "))
}

func (e *refusedError) Unwrap() error { return errRefusedAddr }

// refusedWhy says what refused the addresses without naming them (the
// reason reaches the sandbox): the classes and the rules that decided.
func refusedWhy(err error) string {
	var re *refusedError
	if !errors.As(err, &re) {
		return ""
	}
	var why []string
	for _, d := range re.refused {
		w := d.Class.String()
		if d.Rule.Name != "" {
			w += ", denied by " + d.Rule.String()
		}
		if !slices.Contains(why, w) {
			why = append(why, w)
		}
	}
	return strings.Join(why, "; ")
}

// mayDial reports whether the proxy may connect to a for a request the
// verdict allowed: the sandbox policy's Reach alone decides.
func (p *Proxy) mayDial(a netip.Addr, v policies.Verdict, pol Decider) bool {
	d := pol.Reach(a, v)
	if !d.Allowed() {
		p.log.Info("proxy: address refused", "reach", d.String())
	}
	return d.Allowed()
}

// isLoop reports whether dst is one of the appliance's own listeners.
func (p *Proxy) isLoop(dst netip.AddrPort) bool {
	for _, l := range p.cfg.Own {
		if l.Port() != dst.Port() {
			continue
		}
		if l.Addr() == dst.Addr() || l.Addr().IsUnspecified() && p.ownAddr(dst.Addr()) {
			return true
		}
	}
	return false
}

// ownAddr reports whether a is an address an unspecified listener is
// reached at: loopback, or the address of another listener.
func (p *Proxy) ownAddr(a netip.Addr) bool {
	return a.IsLoopback() || slices.ContainsFunc(p.cfg.Own, func(l netip.AddrPort) bool { return l.Addr() == a })
}

// dialChecked connects to the first reachable address of targets: the
// exact addresses that were checked, never a name.
func (p *Proxy) dialChecked(ctx context.Context, targets []netip.AddrPort) (net.Conn, error) {
	if len(targets) == 0 {
		return nil, errors.New("proxy: no checked address to dial")
	}
	var errs []error
	for _, t := range targets {
		var c net.Conn
		var err error
		if p.testDial != nil {
			c, err = p.testDial(ctx, "tcp", t.String())
		} else {
			c, err = dialAddr(ctx, p.cfg.DialTimeout, t)
		}
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("proxy: dial: %w", errors.Join(errs...))
}

// dialAddr connects to one checked address without TCP keep-alive probes
// (four setsockopt calls per socket; the proxy's own idle timeouts close
// dead connections). Not Dialer.DialTCP: its local address argument
// cannot be left out, and a zero one costs a bind that also takes the
// ephemeral port before connect.
func dialAddr(ctx context.Context, timeout time.Duration, t netip.AddrPort) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout, KeepAlive: -1}
	return d.DialContext(ctx, "tcp", t.String())
}

// dialTargetsKey carries the checked addresses of one request to the
// transport's dialer.
type dialTargetsKey struct{}

type dialTargets struct {
	addrs  []netip.AddrPort
	dialed func(netip.AddrPort)
}

// transportFor returns the sandbox's upstream. Its dialers only dial
// the addresses the request carries; a request without them cannot open
// a connection. Upstreams are per sandbox so that a connection checked
// under one policy is never reused under another.
func (p *Proxy) transportFor(sandboxID string) *upstream {
	if t, ok := p.transports.Load(sandboxID); ok {
		return t.(*upstream)
	}
	actual, _ := p.transports.LoadOrStore(sandboxID, newUpstream(p))
	return actual.(*upstream)
}

// newTransport is the upstream transport for requests off the direct
// path (bodies, upgrades).
func (p *Proxy) newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            p.transportDial,
		TLSClientConfig:        p.upstreamTLS(),
		TLSHandshakeTimeout:    p.cfg.DialTimeout,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           4 * p.cfg.MaxIdlePerHost,
		MaxIdleConnsPerHost:    p.cfg.MaxIdlePerHost,
		IdleConnTimeout:        90 * time.Second,
		ResponseHeaderTimeout:  5 * time.Minute,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 1 << 20,
	}
}

// upstreamTLS verifies upstream servers against the configured roots.
func (p *Proxy) upstreamTLS() *tls.Config {
	return &tls.Config{RootCAs: p.roots, MinVersion: tls.VersionTLS12, ClientSessionCache: p.sessions}
}

func (p *Proxy) transportDial(ctx context.Context, _, _ string) (net.Conn, error) {
	dt, ok := ctx.Value(dialTargetsKey{}).(*dialTargets)
	if !ok || len(dt.addrs) == 0 {
		return nil, errors.New("proxy: refusing to dial an unchecked address")
	}
	c, err := p.dialChecked(ctx, dt.addrs)
	if err != nil {
		return nil, err
	}
	if dt.dialed != nil {
		if ap, ok := addrPort(c.RemoteAddr()); ok {
			dt.dialed(ap)
		}
	}
	return c, nil
}
