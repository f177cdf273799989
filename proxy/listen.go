package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ServeTransparent accepts steered connections until ln is closed or the
// proxy is. Each connection's original destination is its local address.
func (p *Proxy) ServeTransparent(ln net.Listener) error {
	return p.serve(ln, func(c net.Conn) {
		dst, ok := addrPort(c.LocalAddr())
		if !ok {
			c.Close()
			return
		}
		p.HandleTransparent(p.ctx, c, dst)
	})
}

// ServeExplicit accepts HTTP proxy clients (absolute-form requests and
// CONNECT) until ln is closed or the proxy is. On a TCP listener it sets
// TCP_DEFER_ACCEPT: a proxy client always speaks first, so the kernel
// hands over a connection once its first request bytes are there, and the
// handler reads them without first waiting for them.
func (p *Proxy) ServeExplicit(ln net.Listener) error {
	deferAccept(ln, p.cfg.SniffTimeout)
	return p.serve(ln, func(c net.Conn) { p.HandleExplicit(p.ctx, c) })
}

// deferAccept sets TCP_DEFER_ACCEPT on ln for about d (whole seconds, at
// least one). A client still silent after that is accepted anyway and
// meets the usual read deadlines. A listener that refuses is served as
// it is.
func deferAccept(ln net.Listener, d time.Duration) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	secs := max(1, int(d/time.Second))
	rc.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, secs)
	})
}

func (p *Proxy) serve(ln net.Listener, handle func(net.Conn)) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return net.ErrClosed
	}
	p.listeners[ln] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, ln)
		p.mu.Unlock()
	}()
	backoff := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || p.ctx.Err() != nil {
				return net.ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				p.log.Warn("proxy: accept", "err", err)
				time.Sleep(backoff)
				backoff = min(2*backoff, time.Second)
				continue
			}
			return fmt.Errorf("proxy: accept: %w", err)
		}
		backoff = 5 * time.Millisecond
		go handle(c)
	}
}

func addrPort(a net.Addr) (netip.AddrPort, bool) {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		ap, err := netip.ParseAddrPort(a.String())
		return ap, err == nil
	}
	ap := ta.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), ap.IsValid()
}
