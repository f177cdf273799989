package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A spliced tunnel between two TCP sockets moves bulk bytes with splice(2)
// (socket to pipe to socket, no copy through user space) and small
// messages with plain reads and writes (fewer system calls than a splice).
// A direction waits for readability holding neither a buffer (it borrows
// one from a pool once bytes are there) nor a pipe (it never waits inside
// splice: Go's splice holds a pipe, two descriptors, for as long as it
// waits): an idle tunnel costs its two sockets and two parked goroutines.

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
	// The sniffed bytes were counted when the sniffer read them.
	for _, b := range pre {
		ut.SetWriteDeadline(time.Now().Add(idle))
		if _, err := ut.Write(b); err != nil {
			return "reset"
		}
	}
	ut.SetWriteDeadline(time.Time{})
	t := &tcpTunnel{idle: idle}
	errc := make(chan error, 1)
	go func() { t.half(ut, ct, &f.up, &f.down); errc <- nil }()
	t.half(ct, ut, &f.down, &f.up)
	<-errc
	err := t.firstErr()
	switch {
	case err == nil:
		return "done"
	case isTimeout(err):
		return "idle-timeout"
	}
	return "reset"
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

// tcpTunnel is the state both directions of one tunnel share.
type tcpTunnel struct {
	idle time.Duration
	err  atomic.Pointer[error]
}

// firstErr is the error that ended the tunnel: the first one either
// direction saw (the other then sees its socket closed).
func (t *tcpTunnel) firstErr() error {
	if e := t.err.Load(); e != nil {
		return *e
	}
	return nil
}

// half copies src to dst until src ends, then half-closes dst; on an error
// it records the error and closes both so the other direction ends too.
// Bytes moved are added to n; other counts the opposite direction.
func (t *tcpTunnel) half(dst, src *net.TCPConn, n, other *atomic.Int64) {
	err := t.copy(dst, src, n, other)
	if err == nil {
		dst.CloseWrite()
		return
	}
	t.err.CompareAndSwap(nil, &err)
	src.Close()
	dst.Close()
}

// copy moves src to dst. A direction is idle when neither it nor the other
// one moved a byte for the idle time: its read deadline is the idle time,
// refreshed at most every idle/8 (a timer update per read costs more than
// the copy), and when it fires while the byte counts moved, it is re-armed.
func (t *tcpTunnel) copy(dst, src *net.TCPConn, n, other *atomic.Int64) error {
	rc, err := src.SyscallConn()
	if err != nil {
		return err
	}
	r := &rawReader{}
	r.fn = r.read // one closure for the life of the direction
	var (
		dl           lazyDeadline
		seen, seenOf int64
	)
	for {
		if at, ok := dl.due(t.idle); ok {
			src.SetReadDeadline(at)
			seen, seenOf = n.Load(), other.Load()
		}
		buf, k, rerr := r.next(rc)
		if k > 0 {
			n.Add(int64(k))
			_, werr := dst.Write((*buf)[:k])
			if werr != nil {
				tunnelBufs.Put(buf)
				return werr
			}
		}
		full := buf != nil && k == len(*buf)
		if buf != nil {
			tunnelBufs.Put(buf)
		}
		switch {
		case rerr == nil && full:
			// A full read: bulk bytes are queued; move them with splice.
			eof, err := t.bulk(dst, src, n)
			if err != nil || eof {
				return err
			}
		case errors.Is(rerr, io.EOF):
			return nil
		case rerr != nil && isTimeout(rerr) && (n.Load() != seen || other.Load() != seenOf):
			dl.reset() // bytes moved within the idle time: not idle
		case rerr != nil:
			return rerr
		}
	}
}

// tunnelBufs lend a read buffer only while bytes are there to copy: a
// direction waiting for its peer holds none.
var tunnelBufs = sync.Pool{New: func() any { b := make([]byte, tunnelBuf); return &b }}

// tunnelBuf is one TLS record, the most a small message is.
const tunnelBuf = 16 << 10

// rawReader reads a socket through its RawConn so that no buffer is held
// while it waits: the buffer is taken from the pool once the socket is
// readable, and given back on EAGAIN.
type rawReader struct {
	fn   func(fd uintptr) bool
	buf  *[]byte
	k    int
	rerr error
}

func (r *rawReader) read(fd uintptr) bool {
	if r.buf == nil {
		r.buf = tunnelBufs.Get().(*[]byte)
	}
	for {
		r.k, r.rerr = syscall.Read(int(fd), *r.buf)
		if r.rerr != syscall.EINTR {
			break
		}
	}
	if r.rerr == syscall.EAGAIN {
		tunnelBufs.Put(r.buf)
		r.buf = nil
		return false // wait for readability
	}
	return true
}

// next waits until the socket is readable, then reads into a pooled
// buffer it returns with the count; the caller puts the buffer back. At
// end of stream it returns io.EOF.
func (r *rawReader) next(rc syscall.RawConn) (*[]byte, int, error) {
	r.buf, r.k, r.rerr = nil, 0, nil
	err := rc.Read(r.fn)
	buf, k, rerr := r.buf, max(r.k, 0), r.rerr
	r.buf = nil
	switch {
	case err != nil:
		rerr = err
	case rerr != nil:
		rerr = os.NewSyscallError("read", rerr)
	case k == 0:
		rerr = io.EOF
	}
	if rerr != nil && k == 0 && buf != nil {
		tunnelBufs.Put(buf)
		buf = nil
	}
	return buf, k, rerr
}

// bulk splices what src has queued to dst, and keeps doing so while more
// bulk arrives. It returns to the caller (the small read) when src queues
// less than a small buffer's worth, so no pipe is held while idle. eof
// reports that src ended.
func (t *tcpTunnel) bulk(dst, src *net.TCPConn, n *atomic.Int64) (eof bool, err error) {
	rc, err := src.SyscallConn()
	if err != nil {
		return false, err
	}
	for {
		avail, eof, err := queued(rc)
		if err != nil || eof {
			return eof, err
		}
		if avail < tunnelBuf {
			return false, nil
		}
		src.SetReadDeadline(time.Now().Add(t.idle))
		w, err := io.CopyN(dst, src, int64(avail))
		n.Add(w)
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// queued reports how many bytes the socket has queued for reading without
// waiting, or that it is at end of stream.
func queued(rc syscall.RawConn) (avail int, eof bool, err error) {
	var ierr error
	cerr := rc.Control(func(fd uintptr) {
		avail, ierr = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
		if ierr != nil || avail > 0 {
			return
		}
		var b [1]byte
		k, _, perr := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case perr == unix.EAGAIN || perr == unix.EINTR:
		case perr != nil:
			ierr = perr
		case k == 0:
			eof = true
		default:
			avail = 1 // arrived between the two calls: let the read take it
		}
	})
	if cerr != nil {
		return 0, false, cerr
	}
	return avail, eof, ierr
}
