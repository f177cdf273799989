package dnsd

import (
	"net"
	"net/netip"
	"sync"
)

// maxTCPPerSource caps concurrent TCP connections from one address, so one
// sandbox holding connections open cannot starve the others.
const maxTCPPerSource = 16

// limitListener closes connections beyond maxTCPPerSource per source.
type limitListener struct {
	net.Listener
	mu  sync.Mutex
	per map[netip.Addr]int
}

func newLimitListener(ln net.Listener) *limitListener {
	return &limitListener{Listener: ln, per: make(map[netip.Addr]int)}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := addrOf(c.RemoteAddr())
		l.mu.Lock()
		n := l.per[src]
		if n < maxTCPPerSource {
			l.per[src] = n + 1
		}
		l.mu.Unlock()
		if n >= maxTCPPerSource {
			c.Close()
			continue
		}
		return &limitConn{Conn: c, l: l, src: src}, nil
	}
}

type limitConn struct {
	net.Conn
	l    *limitListener
	src  netip.Addr
	once sync.Once
}

func (c *limitConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.per[c.src]--; c.l.per[c.src] <= 0 {
			delete(c.l.per, c.src)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
