package proxy

import (
	"net"
	"time"

	"airlock/proxy/internal/relay"
)

// A spliced tunnel between two TCP sockets is moved by the relays
// (package relay); other connections fall back to pipe.

// tunnel copies bytes both ways between the client and upstream until both
// directions end, counting them into f. The bytes the sniffer read are
// replayed first. When both ends are TCP sockets the copy is zero-copy
// (splice); otherwise it falls back to pipe. It returns the close reason.
func tunnel(f *flow, client, up net.Conn, idle time.Duration) string {
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
			return "reset"
		}
		pre = nil
	}
	// The relay owns and closes the sockets from here on; f.gate ends
	// the tunnel from outside.
	done, err := r.Adopt(&f.gate, ct, ut, pre, &f.up, &f.down, idle)
	if err != nil {
		ct.Close() // fail closed
		ut.Close()
		return "reset"
	}
	return <-done
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
func pipeAfter(pre [][]byte, client net.Conn, up *net.TCPConn, idle time.Duration) string {
	if err := writeAll(up, pre, idle); err != nil {
		return "reset"
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
