package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"airlock/proxy/internal/h1"
	"airlock/proxy/internal/rawio"
)

// unwrapper is a body wrapper that can give back what it wraps.
type unwrapper interface{ unwrap() io.ReadCloser }

func unwrapBody(rc io.ReadCloser) io.ReadCloser {
	for {
		u, ok := rc.(unwrapper)
		if !ok {
			return rc
		}
		rc = u.unwrap()
	}
}

// deadlineBody gives every read of a request body a deadline.
type deadlineBody struct {
	rc io.ReadCloser
	c  net.Conn
	d  time.Duration
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	b.c.SetReadDeadline(time.Now().Add(b.d))
	return b.rc.Read(p)
}
func (b *deadlineBody) Close() error          { return b.rc.Close() }
func (b *deadlineBody) unwrap() io.ReadCloser { return b.rc }

// continueBody sends "100 Continue" to the client on the first read: the
// body is only read once the request was allowed.
type continueBody struct {
	rc   io.ReadCloser
	w    io.Writer
	once sync.Once
}

func (b *continueBody) Read(p []byte) (int, error) {
	var err error
	b.once.Do(func() { _, err = io.WriteString(b.w, "HTTP/1.1 100 Continue\r\n\r\n") })
	if err != nil {
		return 0, err
	}
	return b.rc.Read(p)
}
func (b *continueBody) Close() error          { return b.rc.Close() }
func (b *continueBody) unwrap() io.ReadCloser { return b.rc }

// splice connects the client to the checked upstream address and copies
// bytes both ways without looking at them.
func (p *Proxy) splice(ctx context.Context, f *flow, c net.Conn) string {
	f.handling = "splice"
	up, err := p.dialChecked(ctx, f.targets)
	if err != nil {
		v := internalDeny(ruleUpstream, "upstream connection failed")
		v.Category = f.verdict.Category
		f.verdict = v
		p.emitDecision(f)
		p.log.Warn("proxy: splice dial", "id", f.id, "err", err)
		return "upstream-error"
	}
	defer up.Close()
	f.dialed.Store(up.RemoteAddr().String())
	p.emitDecision(f)
	s := &splicedConn{f: f, client: c, up: up}
	p.trackSplice(s)
	defer p.untrackSplice(s)
	reason := tunnel(f, c, up, p.tunnelIdle())
	if v, ok := s.closedBy(); ok {
		f.verdict = v
		return reasonReload
	}
	return reason
}

func (p *Proxy) tunnelIdle() time.Duration { return max(p.cfg.IdleTimeout, 10*time.Minute) }

// pipe copies both ways until both directions end; a half-close is passed
// on. Each read has the idle deadline.
func pipe(a net.Conn, b io.ReadWriter, idle time.Duration) string {
	errc := make(chan error, 1)
	go func() { errc <- copyHalf(b, a, idle) }()
	err2 := copyHalf(a, b, idle)
	err := <-errc
	if err == nil {
		err = err2
	}
	if err == nil {
		return "done"
	}
	if isTimeout(err) {
		return "idle-timeout"
	}
	return "reset"
}

type readDeadliner interface{ SetReadDeadline(time.Time) error }

// Copy buffers: every tunnel direction reads into a small buffer while
// idle and borrows a large pooled one only while bytes stream, so 10,000
// idle tunnels cost little memory and bulk transfers few system calls.
const (
	smallBuf = 2 << 10
	largeBuf = 128 << 10
)

var bufPool = sync.Pool{New: func() any { b := make([]byte, largeBuf); return &b }}

func copyHalf(dst io.Writer, src io.Reader, idle time.Duration) error {
	small := make([]byte, smallBuf)
	var big *[]byte
	defer func() {
		if big != nil {
			bufPool.Put(big)
		}
	}()
	rd, _ := src.(readDeadliner)
	var err error
	var dl rawio.LazyDeadline
	for {
		if t, ok := dl.Due(idle); rd != nil && ok {
			rd.SetReadDeadline(t)
		}
		buf := small
		if big != nil {
			buf = *big
		}
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
				break
			}
		}
		switch {
		case big == nil && n == len(small):
			big = bufPool.Get().(*[]byte)
		case big != nil && n < smallBuf:
			bufPool.Put(big)
			big = nil
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				err = rerr
			}
			break
		}
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else if c, ok := dst.(io.Closer); ok && err == nil {
		c.Close()
	}
	if err != nil {
		// Unblock the other direction.
		if c, ok := src.(io.Closer); ok {
			c.Close()
		}
		if c, ok := dst.(io.Closer); ok {
			c.Close()
		}
	}
	return err
}

// signalBody reports when the upstream transport is done with a request
// body (it closes it, possibly after RoundTrip returned), so the
// connection's reader is never used by two goroutines at once.
type signalBody struct {
	rc     io.ReadCloser
	closed chan struct{}
	once   sync.Once
}

func (b *signalBody) Read(p []byte) (int, error) { return b.rc.Read(p) }
func (b *signalBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}
func (b *signalBody) unwrap() io.ReadCloser { return b.rc }

// wait returns true once the body is complete or its user closed it; false
// if neither happens within d.
func (b *signalBody) wait(inner io.ReadCloser, d time.Duration) bool {
	if inner == nil || inner == http.NoBody {
		return true
	}
	if h1.Done(inner) {
		select {
		case <-b.closed:
		default:
			// Fully read; the transport may still hold it but never reads
			// past the end.
		}
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.closed:
		return true
	case <-t.C:
		return false
	}
}
