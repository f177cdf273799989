package rawio

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Socket reads and writes a TCP socket of an inspected connection (the
// client's, below its TLS, and a pooled upstream's) with raw system calls
// through the socket's RawConn (see the package doc). Waiting for
// readiness, deadlines and Close are Go's poller's, exactly as for
// net.Conn's own Read and Write.
//
// A read may carry a send (see BulkConn): it runs first inside the raw
// read, after the socket's readiness was reset, and the read then waits
// for the answer without a first read that could only fail.
type Socket struct {
	rc syscall.RawConn

	rmu    sync.Mutex
	rp     []byte
	rn     int
	rerr   error
	send   func() error // run by the next readStep, then nil
	sent   bool
	sendEr error
	onRead func(uintptr) bool

	wmu     sync.Mutex
	wp      []byte
	wn      int
	werr    error
	onWrite func(uintptr) bool
}

// NewSocket returns raw I/O for c's socket; nil when c gives no raw access.
func NewSocket(c *net.TCPConn) *Socket {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	r := &Socket{rc: rc}
	r.onRead, r.onWrite = r.readStep, r.writeStep
	return r
}

// Read is net.Conn's Read.
func (r *Socket) Read(p []byte) (int, error) { return r.ReadAfter(p, nil) }

// ReadAfter is Read that, when send is not nil, calls send first, inside
// the read (see Socket); a send error is returned as it is.
func (r *Socket) ReadAfter(p []byte, send func() error) (int, error) {
	if len(p) == 0 && send == nil {
		return 0, nil
	}
	r.rmu.Lock()
	defer r.rmu.Unlock()
	r.rp, r.rn, r.rerr = p, 0, nil
	r.send, r.sent, r.sendEr = send, false, nil
	err := r.rc.Read(r.onRead)
	n, rerr, serr := r.rn, r.rerr, r.sendEr
	r.rp, r.rerr, r.send, r.sendEr = nil, nil, nil, nil
	switch {
	case serr != nil:
		return 0, serr
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", rerr)}
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

func (r *Socket) readStep(fd uintptr) bool {
	if r.send != nil && !r.sent {
		r.sent = true
		r.sendEr = r.send()
		return r.sendEr != nil
	}
	if len(r.rp) == 0 {
		return true
	}
	for {
		n, err := Read(int(fd), r.rp)
		switch err {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		r.rn, r.rerr = n, err
		return true
	}
}

// Write is net.Conn's Write: all of p, or an error.
func (r *Socket) Write(p []byte) (int, error) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.wp, r.wn, r.werr = p, 0, nil
	err := r.rc.Write(r.onWrite)
	n, werr := r.wn, r.werr
	r.wp, r.werr = nil, nil
	switch {
	case werr != nil:
		return n, &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", werr)}
	case err != nil:
		return n, err
	}
	return n, nil
}

func (r *Socket) writeStep(fd uintptr) bool {
	for len(r.wp) > 0 {
		n, err := Write(int(fd), r.wp)
		switch err {
		case nil:
			r.wn += n
			r.wp = r.wp[n:]
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			r.werr = err
			return true
		}
	}
	return true
}
