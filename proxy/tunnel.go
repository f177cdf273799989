package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"airlock/proxy/internal/rawio"
	"airlock/proxy/internal/relay"
)

// splice connects the client to the checked upstream address and copies
// bytes both ways without looking at them.
func (p *Proxy) splice(ctx context.Context, f *flow, c net.Conn) closeReason {
	f.handling = handleSplice
	up, err := p.dialChecked(ctx, f.targets)
	if err != nil {
		v := internalDeny(ruleUpstream, "upstream connection failed")
		v.Category = f.verdict.Category
		f.verdict = v
		p.emitDecision(f)
		p.log.Warn("proxy: splice dial", "id", f.id, "err", err)
		return reasonUpstream
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

// tunnel copies bytes both ways between the client and upstream until both
// directions end, counting them into f. The bytes the sniffer read are
// replayed first. When both ends are TCP sockets the copy is zero-copy
// (splice); otherwise it falls back to pipe. It returns the close reason.
func tunnel(f *flow, client, up net.Conn, idle time.Duration) closeReason {
	ct, pre, ok := underTCP(client)
	ut, ok2 := up.(*net.TCPConn)
	if !ok || !ok2 {
		return pipe(client, up, idle)
	}
	r, err := relay.Get()
	if err != nil {
		return pipeAfter(pre, client, ut, idle)
	}
	// The sniffed bytes were counted when the sniffer read them. The
	// relay sends them first when they fit one buffer (a ClientHello, a
	// request head), else they are written here.
	n := 0
	for _, b := range pre {
		n += len(b)
	}
	if n > relay.BufSize {
		if err := writeAll(ut, pre, idle); err != nil {
			return reasonReset
		}
		pre = nil
	}
	// The relay owns and closes the sockets from here on; f.gate ends
	// the tunnel from outside.
	done, err := r.Adopt(&f.gate, ct, ut, pre, &f.up, &f.down, idle)
	if err != nil {
		ct.Close() // fail closed
		ut.Close()
		return reasonReset
	}
	return relayReason(<-done)
}

// relayReason is the close reason of a tunnel the relay ended.
func relayReason(e relay.End) closeReason {
	switch e {
	case relay.Done:
		return reasonDone
	case relay.Idle:
		return reasonIdle
	}
	return reasonReset
}

// writeAll writes the bufs to c, each with the idle deadline.
func writeAll(c *net.TCPConn, bufs [][]byte, idle time.Duration) error {
	for _, b := range bufs {
		c.SetWriteDeadline(time.Now().Add(idle))
		if _, err := c.Write(b); err != nil {
			return err
		}
	}
	return c.SetWriteDeadline(time.Time{})
}

// pipeAfter is pipe for a client whose replayed bytes underTCP took.
func pipeAfter(pre [][]byte, client net.Conn, up *net.TCPConn, idle time.Duration) closeReason {
	if err := writeAll(up, pre, idle); err != nil {
		return reasonReset
	}
	return pipe(client, up, idle)
}

// underTCP finds the TCP socket under the proxy's connection wrappers and
// the bytes they still hold for replay, in order. ok is false when some
// wrapper is not known to be transparent.
func underTCP(c net.Conn) (tc *net.TCPConn, pre [][]byte, ok bool) {
	var pcs []*prefixConn
	for range 8 {
		switch w := c.(type) {
		case *net.TCPConn:
			for _, p := range pcs {
				p.pre = nil // the tunnel replays them; do not keep them for its life
			}
			return w, pre, true
		case *prefixConn:
			if len(w.pre) > 0 {
				pre = append(pre, w.pre)
			}
			pcs = append(pcs, w)
			c = w.Conn
		case *countConn:
			c = w.Conn
		default:
			return nil, nil, false
		}
	}
	return nil, nil, false
}

// rawUnder finds the TCP socket under the proxy's client-side wrappers
// when none of them changes the bytes from now on: no replay bytes left,
// only byte counting (whose flow it returns). ok is false otherwise.
func rawUnder(c net.Conn) (tc *net.TCPConn, f *flow, ok bool) {
	for range 8 {
		switch w := c.(type) {
		case *net.TCPConn:
			return w, f, true
		case *prefixConn:
			if len(w.pre) > 0 {
				return nil, nil, false
			}
			c = w.Conn
		case *countConn:
			if f != nil {
				return nil, nil, false
			}
			f, c = w.f, w.Conn
		default:
			return nil, nil, false
		}
	}
	return nil, nil, false
}

// pipe copies both ways until both directions end; a half-close is passed
// on. Each read has the idle deadline.
func pipe(a net.Conn, b io.ReadWriter, idle time.Duration) closeReason {
	errc := make(chan error, 1)
	go func() { errc <- copyHalf(b, a, idle) }()
	err2 := copyHalf(a, b, idle)
	err := <-errc
	if err == nil {
		err = err2
	}
	if err == nil {
		return reasonDone
	}
	if isTimeout(err) {
		return reasonIdle
	}
	return reasonReset
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
