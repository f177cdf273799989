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
// messages with plain reads and writes. A direction waits for readability
// holding neither a buffer nor a pipe (it borrows one from a pool once
// bytes are there and gives it back when they have moved): an idle tunnel
// costs its two sockets and two parked goroutines.

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

// copy moves src to dst. Small messages are read into a pooled buffer and
// written (for a few hundred bytes a copy costs less than a splice's page
// references); once a read fills the buffer, bulk bytes are queued and the
// direction switches to splice(2): socket to pipe to socket, never through
// user space, until a splice moves less than a buffer's worth. The buffer
// is borrowed from a pool once src is readable, the pipe likewise, and both
// go back as soon as src has nothing more queued: a direction that waits
// holds neither.
//
// A direction is idle when neither it nor the other one moved a byte for
// the idle time: its read deadline is the idle time, refreshed at most
// every idle/8 (a timer update per read costs more than the move), and
// when it fires while the byte counts moved, it is re-armed.
func (t *tcpTunnel) copy(dst, src *net.TCPConn, n, other *atomic.Int64) error {
	rc, err := src.SyscallConn()
	if err != nil {
		return err
	}
	wc, err := dst.SyscallConn()
	if err != nil {
		return err
	}
	s := &splicer{}
	s.inFn, s.outFn, s.readFn = s.in, s.out, s.read // one closure each for the life of the direction
	defer s.drop()
	var (
		dl           lazyDeadline
		seen, seenOf int64
		bulk         bool
	)
	for {
		if at, ok := dl.due(t.idle); ok {
			src.SetReadDeadline(at)
			seen, seenOf = n.Load(), other.Load()
		}
		var (
			k    int
			rerr error
		)
		if bulk {
			k, rerr = s.fill(rc)
			if k > 0 {
				n.Add(int64(k))
				if werr := s.drain(wc); werr != nil {
					return werr
				}
			}
			bulk = k >= tunnelBuf
		} else {
			var buf *[]byte
			buf, k, rerr = s.readSmall(rc)
			if k > 0 {
				n.Add(int64(k))
				_, werr := dst.Write((*buf)[:k])
				tunnelBufs.Put(buf)
				if werr != nil {
					return werr
				}
			}
			bulk = k == tunnelBuf
		}
		switch {
		case rerr == nil:
		case errors.Is(rerr, io.EOF):
			return nil
		case isTimeout(rerr) && (n.Load() != seen || other.Load() != seenOf):
			dl.reset() // bytes moved within the idle time: not idle
		default:
			return rerr
		}
	}
}

// tunnelBufs lend a read buffer only while bytes are there to copy.
var tunnelBufs = sync.Pool{New: func() any { b := make([]byte, tunnelBuf); return &b }}

// tunnelBuf is one TLS record, the most a small message is.
const tunnelBuf = 16 << 10

// readSmall waits until src is readable, then reads into a pooled buffer
// it returns with the count (the caller puts it back); io.EOF at the end
// of src.
func (s *splicer) readSmall(rc syscall.RawConn) (*[]byte, int, error) {
	s.buf, s.inK, s.inErr = nil, 0, nil
	err := rc.Read(s.readFn)
	buf, k := s.buf, s.inK
	s.buf = nil
	switch {
	case err != nil:
	case s.inErr != nil:
		err = os.NewSyscallError("read", s.inErr)
	case k == 0:
		err = io.EOF
	}
	if k == 0 && buf != nil {
		tunnelBufs.Put(buf)
		buf = nil
	}
	return buf, k, err
}

func (s *splicer) read(fd uintptr) bool {
	if s.buf == nil {
		s.buf = tunnelBufs.Get().(*[]byte)
	}
	for {
		k, err := syscall.Read(int(fd), *s.buf)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			tunnelBufs.Put(s.buf) // nothing queued: wait holding no buffer
			s.buf = nil
			return false
		case nil:
			s.inK = k
		default:
			s.inErr = err
		}
		return true
	}
}

// splicer is one direction's pipe and the state of its current splice.
type splicer struct {
	p                   *splicePipe // held only while bytes are in flight
	buf                 *[]byte     // likewise, for a small read
	inFn, outFn, readFn func(fd uintptr) bool
	inK, left           int
	inErr, oErr         error
}

// fill waits until src is readable, then splices what it has queued (up
// to the pipe's size) into the pipe. It returns the count, or io.EOF at
// the end of src. When src has nothing queued the pipe goes back to the
// pool before the wait.
func (s *splicer) fill(rc syscall.RawConn) (int, error) {
	s.inK, s.inErr = 0, nil
	if err := rc.Read(s.inFn); err != nil {
		s.release() // the pipe, if any, is empty: fill starts with it drained
		return 0, err
	}
	switch {
	case s.inErr != nil:
		s.drop()
		return 0, os.NewSyscallError("splice", s.inErr)
	case s.inK == 0:
		s.release()
		return 0, io.EOF
	}
	return s.inK, nil
}

func (s *splicer) in(fd uintptr) bool {
	if s.p == nil {
		p, err := pipes.get()
		if err != nil {
			s.inErr = err
			return true
		}
		s.p = p
	}
	for {
		k, err := unix.Splice(int(fd), nil, s.p.w, nil, s.p.size, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		switch err {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			s.release() // nothing queued: wait holding no pipe
			return false
		case nil:
			s.inK = int(k)
		default:
			s.inErr = err
		}
		return true
	}
}

// drain splices everything in the pipe to dst, waiting while dst's send
// queue is full. The pipe stays with the direction (it is empty now) for
// the next fill, which gives it back if src has nothing more.
func (s *splicer) drain(wc syscall.RawConn) error {
	s.left, s.oErr = s.inK, nil
	if err := wc.Write(s.outFn); err != nil {
		s.drop()
		return err
	}
	if s.oErr != nil {
		s.drop()
		return os.NewSyscallError("splice", s.oErr)
	}
	return nil
}

func (s *splicer) out(fd uintptr) bool {
	for s.left > 0 {
		k, err := unix.Splice(s.p.r, nil, int(fd), nil, s.left, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		switch err {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false // dst's send queue is full: wait for room
		case nil:
			s.left -= int(k)
		default:
			s.oErr = err
			return true
		}
	}
	return true
}

// release gives an empty pipe back to the pool.
func (s *splicer) release() {
	if s.p != nil {
		pipes.put(s.p)
		s.p = nil
	}
}

// drop closes a pipe that may still hold bytes (after an error): it must
// never carry them into another tunnel.
func (s *splicer) drop() {
	if s.p != nil {
		s.p.close()
		s.p = nil
	}
}

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
