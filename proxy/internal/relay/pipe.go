package relay

import (
	"sync"

	"golang.org/x/sys/unix"
)

// bufs lend a read buffer only while bytes are there to copy.
var bufs = sync.Pool{New: func() any { b := make([]byte, BufSize); return &b }}

// BufSize is one TLS record, the most a small message is, and the most
// replayed bytes Adopt sends first.
const BufSize = 16 << 10

// splicePipe is a pipe used only between two splices of one direction.
type splicePipe struct {
	r, w int
	size int
}

func (p *splicePipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
}

// PipeSize is what one splice moves at most: the pipe is grown to it so a
// bulk transfer takes few calls (the kernel allows up to
// /proc/sys/fs/pipe-max-size, 1 MiB by default, without privilege). Its
// pages are only those of bytes in flight.
const PipeSize = 1 << 20

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
	if sz, err := unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, PipeSize); err == nil {
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
