package preview

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"airlock/audit"
)

// entry is a live preview: its record, its upstream transport and the
// connections open through it (closed when it ends).
type entry struct {
	p      Preview
	limit  *rate.Limiter
	proxy  *httputil.ReverseProxy
	tr     *http.Transport
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	opened sync.Map // principal → first use recorded
	fmu    sync.Mutex
	flood  floodSlot // requests over limit in this interval
}

func newEntry(p Preview, m *Manager) *entry {
	e := &entry{p: p, limit: rate.NewLimiter(rate.Limit(m.cfg.Rate), m.cfg.Burst), conns: map[net.Conn]struct{}{}}
	e.tr = &http.Transport{
		Proxy:                 nil,
		DialContext:           e.dial(m.cfg.Dial),
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		DisableCompression:    true,
	}
	e.proxy = m.reverseProxy(e)
	return e
}

// upstream is the address the transport is given; the dialer ignores it
// and always dials the preview's port in the sandbox.
func (e *entry) upstream() string { return "127.0.0.1:" + strconv.Itoa(int(e.p.Port)) }

func (e *entry) dial(d Dialer) func(ctx context.Context, _, _ string) (net.Conn, error) {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		c, err := d(ctx, e.p.Sandbox, e.p.Port)
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, e: e}
		if !e.track(tc) {
			c.Close()
			return nil, errEnded
		}
		return tc, nil
	}
}

func (e *entry) track(c net.Conn) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.conns[c] = struct{}{}
	return true
}

func (e *entry) untrack(c net.Conn) {
	e.mu.Lock()
	delete(e.conns, c)
	e.mu.Unlock()
}

// close refuses new connections and closes the open ones; it returns
// how many it closed.
func (e *entry) close() int {
	e.mu.Lock()
	e.closed = true
	cs := e.conns
	e.conns = map[net.Conn]struct{}{}
	e.mu.Unlock()
	for c := range cs {
		c.(*trackedConn).Conn.Close()
	}
	e.tr.CloseIdleConnections()
	return len(cs)
}

func (e *entry) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

type trackedConn struct {
	net.Conn
	e    *entry
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.e.untrack(c) })
	return c.Conn.Close()
}

// note is floodSlot.note for the requests over this preview's rate limit.
func (e *entry) note(ev audit.Event) (audit.Event, bool) {
	e.fmu.Lock()
	defer e.fmu.Unlock()
	return e.flood.note(ev)
}

// flush ends the interval of the requests over the rate limit.
func (e *entry) flush(now time.Time) (audit.Event, bool) {
	e.fmu.Lock()
	defer e.fmu.Unlock()
	ev, ok, _ := e.flood.flush(now)
	return ev, ok
}
