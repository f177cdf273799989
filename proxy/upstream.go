package proxy

import (
	"net/http"
	"net/netip"
	"time"

	"airlock/proxy/internal/h1"
)

// upstream is a sandbox's way to the servers it may reach. Requests
// without a body (GET, HEAD) take the direct path, h1.Pool: an HTTP/1.1
// exchange written and read by the goroutine serving the client.
// Everything else (bodies, upgrades) goes through net/http's Transport.
// Both dial only the checked addresses the request carries.
type upstream struct {
	pool *h1.Pool
	tr   *http.Transport
}

// upIdleTimeout is how long a pooled connection may stay idle (a
// variable so that a test can shorten it).
var upIdleTimeout = 90 * time.Second

func newUpstream(p *Proxy) *upstream {
	return &upstream{tr: p.newTransport(), pool: h1.NewPool(h1.PoolConfig{
		Dial:           p.dialChecked,
		TLS:            p.upstreamTLS,
		DialTimeout:    p.cfg.DialTimeout,
		MaxIdlePerHost: p.cfg.MaxIdlePerHost,
		IdleTimeout:    upIdleTimeout,
	})}
}

// roundTrip sends req to one of targets; the flow learns the address of
// the first connection the direct path used.
func (u *upstream) roundTrip(req *http.Request, targets []netip.AddrPort, f *flow) (*http.Response, error) {
	if !h1.Direct(req) {
		return u.tr.RoundTrip(req)
	}
	resp, remote, err := u.pool.RoundTrip(req, targets)
	if remote.IsValid() && f.dialedAddr() == "" {
		f.dialed.Store(remote.String())
	}
	return resp, err
}

// CloseIdleConnections closes every idle connection of both paths.
func (u *upstream) CloseIdleConnections() {
	u.pool.CloseIdleConnections()
	u.tr.CloseIdleConnections()
}
