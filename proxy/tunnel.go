package proxy

import (
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A spliced tunnel between two TCP sockets moves bulk bytes with splice(2)
// (socket to pipe to socket, no copy through user space) and small
// messages with plain reads and writes, all from the relays (relay.go): a
// few goroutines with an epoll set each, not a goroutine per direction. A
// direction waits for readability holding neither a buffer nor a pipe (it
// borrows one from a pool once bytes are there and gives it back when they
// have moved): an idle tunnel costs its two sockets and a small record
// beside the goroutine that called tunnel. The relay closes both sockets
// when the tunnel ends, whatever the reason.

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
	r, err := getRelay()
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
	if n > tunnelBuf {
		if err := writeAll(ut, pre, idle); err != nil {
			return "reset"
		}
		pre = nil
	}
	// The relay owns and closes the sockets from here on; f.gate ends
	// the tunnel from outside.
	done, err := r.adopt(&f.gate, ct, ut, pre, &f.up, &f.down, idle)
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

// tunnelBufs lend a read buffer only while bytes are there to copy.
var tunnelBufs = sync.Pool{New: func() any { b := make([]byte, tunnelBuf); return &b }}

// tunnelBuf is one TLS record, the most a small message is.
const tunnelBuf = 16 << 10

// splicePipe is a pipe used only between two splices of one direction.
type splicePipe struct {
	r, w int
	size int
}

func (p *splicePipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
}

// pipeSize is what one splice moves at most: the pipe is grown to it so a
// bulk transfer takes few calls (the kernel allows up to
// /proc/sys/fs/pipe-max-size, 1 MiB by default, without privilege). Its
// pages are only those of bytes in flight.
const pipeSize = 1 << 20

// pipePool keeps empty pipes between uses, at most maxIdle of them (each
// is two descriptors); a pipe beyond that is closed on its return.
type pipePool struct {
	mu   sync.Mutex
	free []*splicePipe
}

const maxIdlePipes = 64

var pipes pipePool

func (pp *pipePool) get() (*splicePipe, error) {
	pp.mu.Lock()
	if k := len(pp.free); k > 0 {
		p := pp.free[k-1]
		pp.free = pp.free[:k-1]
		pp.mu.Unlock()
		return p, nil
	}
	pp.mu.Unlock()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, err
	}
	p := &splicePipe{r: fds[0], w: fds[1], size: 4 << 10}
	// Over the user's pipe-page allowance the kernel refuses to grow it
	// (and may have made it smaller than the default): use what it has.
	if sz, err := unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, pipeSize); err == nil {
		p.size = sz
	} else if sz, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GETPIPE_SZ, 0); err == nil && sz > 0 {
		p.size = sz
	}
	return p, nil
}

func (pp *pipePool) put(p *splicePipe) {
	pp.mu.Lock()
	if len(pp.free) < maxIdlePipes {
		pp.free = append(pp.free, p)
		p = nil
	}
	pp.mu.Unlock()
	if p != nil {
		p.close()
	}
}
