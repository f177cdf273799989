package relay

import (
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/proxy/internal/rawio"
)

// End is why a tunnel ended.
type End int

const (
	Done  End = iota // both directions ended
	Reset            // an error, a reset, or the gate closed
	Idle             // nothing moved for the idle time
)

// relayEvents is how many events one epoll_wait takes.
const relayEvents = 128

// relaySweep is how often a relay checks its tunnels for idleness.
const relaySweep = 100 * time.Millisecond

// relayBudget is how many reads one direction makes before the relay
// serves the others (a bulk direction comes back after them).
const relayBudget = 4

type Relay struct {
	ep     int
	file   *os.File // ep, in Go's poller
	rc     syscall.RawConn
	waitFn func(uintptr) bool
	epoch  time.Time

	mu      sync.Mutex // guards all below and every tunnel's state
	tuns    map[uint64]*rtun
	next    uint64
	armed   bool // a sweep deadline is set
	evs     []unix.EpollEvent
	again   []*rdir
	scratch []byte // one read's bytes, written at once
	now     int64  // nanoseconds since epoch, at the start of the batch
	fatal   error
}

// rtun is one tunnel: side 0 is the client, side 1 the upstream; dir 0
// copies the client to the upstream (counted up), dir 1 back (down).
type rtun struct {
	id    uint64
	sides [2]rside
	dirs  [2]rdir
	idle  int64
	last  int64 // when a byte last moved either way
	open  int   // directions not yet ended
	dead  bool
	done  chan End
}

// rside is one socket of a tunnel, owned by the relay (-1 once closed),
// and its readiness since the last edge.
type rside struct {
	fd                 int
	key                uint64 // the epoll event data: tunnel id and side
	readable, writable bool
	hup                bool // the peer's end (or an error) was reported: read to EOF
	outArmed           bool // EPOLLOUT is in the socket's event mask
}

// Sockets are registered for input only and start writable (a new
// tunnel's send queues are empty): a writable edge at registration would
// wake the relay for nothing. The first write the socket does not take
// in full adds EPOLLOUT, which stays.
const (
	relayIn  = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET
	relayOut = relayIn | unix.EPOLLOUT
)

// block notes that s takes no more for now and makes sure its next
// writable edge is reported. r.mu is held.
func (r *Relay) block(s *rside) error {
	s.writable = false
	if s.outArmed {
		return nil
	}
	s.outArmed = true
	ev := unix.EpollEvent{Events: relayOut, Fd: int32(uint32(s.key)), Pad: int32(uint32(s.key >> 32))}
	return rawEpollCtl(r.ep, unix.EPOLL_CTL_MOD, s.fd, &ev)
}

type rdir struct {
	t        *rtun
	src, dst *rside
	n        *atomic.Int64
	pend     *[]byte // bytes dst would not take yet
	off, end int
	p        *splicePipe // held only while bytes are in it or the source streams
	inPipe   int
	bulk     bool // the last read filled the buffer: splice
	eof      bool // src ended; dst is shut down once pend and the pipe are empty
	ended    bool
	queued   bool // in the relay's again list
}

// The system calls on a side's socket, retried on EINTR; a count is never
// negative. They are made with the relay's mutex held.

func (s *rside) read(b []byte) (int, error) {
	for {
		k, err := rawio.Read(s.fd, b)
		if err != unix.EINTR {
			return max(k, 0), err
		}
	}
}

func (s *rside) write(b []byte) (int, error) {
	for {
		k, err := rawio.Write(s.fd, b)
		if err != unix.EINTR {
			return max(k, 0), err
		}
	}
}

// spliceIn moves up to n bytes from the socket into p.
func (s *rside) spliceIn(p *splicePipe, n int) (int, error) {
	for {
		k, err := rawSplice(s.fd, p.w, n)
		if err != unix.EINTR {
			return int(max(k, 0)), err
		}
	}
}

// spliceOut moves up to n bytes from p into the socket.
func (s *rside) spliceOut(p *splicePipe, n int) (int, error) {
	for {
		k, err := rawSplice(p.r, s.fd, n)
		if err != unix.EINTR {
			return int(max(k, 0)), err
		}
	}
}

// dupConn takes a duplicate of c's descriptor (close-on-exec; it shares
// the socket and its non-blocking mode with c).
func dupConn(c *net.TCPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, os.NewSyscallError("fcntl", derr)
	}
	return fd, nil
}

var (
	relayOnce sync.Once
	relays    []*Relay
	relayErr  error
	relayPick atomic.Uint64
)

// Get returns one of the relays, round robin, starting them on first
// use.
func Get() (*Relay, error) {
	relayOnce.Do(func() {
		for range max(1, runtime.GOMAXPROCS(0)) {
			r, err := newRelay()
			if err != nil {
				relayErr = err
				return
			}
			relays = append(relays, r)
		}
		for _, r := range relays {
			go r.loop()
		}
	})
	if relayErr != nil {
		return nil, relayErr
	}
	return relays[relayPick.Add(1)%uint64(len(relays))], nil
}

func newRelay() (*Relay, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	// Non-blocking, so os.NewFile puts it in Go's poller (epoll_wait
	// itself is always called with a zero timeout).
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return nil, os.NewSyscallError("fcntl", err)
	}
	f := os.NewFile(uintptr(ep), "relay-epoll")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	r := &Relay{
		ep: ep, file: f, rc: rc, epoch: time.Now(),
		tuns:    map[uint64]*rtun{},
		evs:     make([]unix.EpollEvent, relayEvents),
		scratch: make([]byte, BufSize),
	}
	r.waitFn = r.wait
	return r, nil
}

func (r *Relay) clock() int64 { return int64(time.Since(r.epoch)) }

// errGateClosed: the tunnel was ended before the relay took its sockets.
var errGateClosed = errors.New("relay: tunnel closed before it started")

// Gate is how a tunnel is ended from outside (Redecide, Close): once
// the relay owns the sockets, closing the net.Conns no longer reaches
// them. The zero value is open and has no tunnel yet.
type Gate struct {
	mu     sync.Mutex
	closed bool
	r      *Relay
	t      *rtun
}

// Close ends the gate's tunnel, now or as soon as it would start. Its
// sockets are closed (the peers see the end) and the tunnel ends with
// Reset.
func (g *Gate) Close() {
	g.mu.Lock()
	g.closed = true
	r, t := g.r, g.t
	g.mu.Unlock()
	if t != nil {
		r.mu.Lock()
		r.finish(t, Reset)
		r.mu.Unlock()
	}
}

// Adopt takes client and up into the relay: it duplicates their
// descriptors, closes the net.TCPConns (so the sockets leave Go's poller)
// and registers the duplicates. The bytes of pre (at most BufSize in
// all) go to up before any other. The tunnel's close reason arrives on the
// returned channel once both directions end. On error the sockets were
// not taken and the caller still owns (and must close) client and up.
func (r *Relay) Adopt(g *Gate, client, up *net.TCPConn, pre [][]byte, upN, downN *atomic.Int64, idle time.Duration) (<-chan End, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, errGateClosed
	}
	cfd, err := dupConn(client)
	if err != nil {
		return nil, err
	}
	ufd, err := dupConn(up)
	if err != nil {
		unix.Close(cfd)
		return nil, err
	}
	// From here the relay owns the sockets: finish closes them.
	client.Close()
	up.Close()
	t := &rtun{idle: int64(idle), open: 2, done: make(chan End, 1)}
	t.sides[0].fd, t.sides[1].fd = cfd, ufd
	t.dirs[0] = rdir{t: t, src: &t.sides[0], dst: &t.sides[1], n: upN}
	t.dirs[1] = rdir{t: t, src: &t.sides[1], dst: &t.sides[0], n: downN}
	if len(pre) > 0 {
		d := &t.dirs[0]
		d.pend = bufs.Get().(*[]byte)
		for _, b := range pre {
			d.end += copy((*d.pend)[d.end:], b)
		}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	r.next++
	t.id = r.next
	r.tuns[t.id] = t
	t.last = r.clock()
	if !r.armed {
		r.armed = true
		r.file.SetReadDeadline(time.Now().Add(relaySweep))
	}
	g.r, g.t = r, t
	for i := range t.sides {
		s := &t.sides[i]
		s.key = t.id<<1 | uint64(i)
		s.writable = true
		ev := unix.EpollEvent{Events: relayIn, Fd: int32(uint32(s.key)), Pad: int32(uint32(s.key >> 32))}
		if err := rawEpollCtl(r.ep, unix.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
			r.finish(t, Reset)
			return t.done, nil
		}
	}
	r.serve(&t.dirs[0]) // writes pre, or queues it for up's first writable edge
	return t.done, nil
}

// loop serves the relay's tunnels for the life of the process.
func (r *Relay) loop() {
	for {
		err := r.rc.Read(r.waitFn)
		switch {
		case r.fatal != nil:
			// epoll_wait failed: end every tunnel (fail closed) and
			// keep going; a new tunnel tries again.
			r.mu.Lock()
			r.fatal = nil
			for _, t := range r.tuns {
				r.finish(t, Reset)
			}
			r.mu.Unlock()
			time.Sleep(relaySweep)
		case errors.Is(err, os.ErrDeadlineExceeded):
			r.sweep()
		case err != nil:
			r.mu.Lock()
			for _, t := range r.tuns {
				r.finish(t, Reset)
			}
			r.mu.Unlock()
			time.Sleep(relaySweep)
		}
	}
}

// wait takes the ready events and serves them. It returns false (wait for
// the epoll descriptor's next edge) once epoll_wait returned fewer events
// than it could take: any event after that wakes the poller again.
func (r *Relay) wait(fd uintptr) bool {
	for {
		n, err := rawEpollWait(int(fd), r.evs)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			r.fatal = os.NewSyscallError("epoll_wait", err)
			return true
		}
		if n == 0 {
			return false
		}
		r.mu.Lock()
		r.now = r.clock()
		for _, ev := range r.evs[:n] {
			key := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			t := r.tuns[key>>1]
			if t == nil {
				continue // ended earlier in this batch
			}
			i := int(key & 1)
			s := &t.sides[i]
			if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				s.readable = true
			}
			if ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				s.hup = true
			}
			if ev.Events&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				s.writable = true
			}
			r.serve(&t.dirs[i])
			r.serve(&t.dirs[1-i])
		}
		for len(r.again) > 0 {
			again := r.again
			r.again = nil
			for _, d := range again {
				d.queued = false
				r.serve(d)
			}
		}
		r.mu.Unlock()
		if n < len(r.evs) {
			return false
		}
	}
}

// serve moves what direction d can move now and ends its tunnel when it
// is done or failed.
func (r *Relay) serve(d *rdir) {
	t := d.t
	if t.dead || d.ended {
		return
	}
	if err := r.pump(d); err != nil {
		r.finish(t, Reset)
		return
	}
	if t.open == 0 {
		r.finish(t, Done)
	}
}

// pump copies src to dst until src has nothing more, dst takes nothing
// more, or the budget is spent (then d comes back after the others).
// Small reads go through the relay's scratch buffer and are written at
// once; only what dst does not take is kept, in a pooled buffer. A read
// that fills the buffer switches to splice through a pooled pipe until a
// splice moves less than a buffer's worth.
func (r *Relay) pump(d *rdir) error {
	for range relayBudget {
		if err := r.flush(d); err != nil || d.pend != nil || d.inPipe > 0 {
			return err
		}
		if d.eof {
			d.release()
			d.ended = true
			d.t.open--
			if d.t.open > 0 {
				rawShutdownWrite(d.dst.fd) // as CloseWrite: a failure shows on the next use
			}
			// Else the tunnel finishes now: closing dst sends its FIN
			// (its own direction ended, so nothing unread makes it a
			// reset).
			return nil
		}
		if !d.src.readable {
			d.release()
			return nil
		}
		if d.bulk {
			if d.p == nil {
				p, err := pipes.get()
				if err != nil {
					return err
				}
				d.p = p
			}
			k, err := d.src.spliceIn(d.p, d.p.size)
			switch {
			case err == unix.EAGAIN:
				d.src.readable = false
				d.release()
				return nil
			case err != nil:
				return err
			case k == 0:
				d.eof = true
				continue
			}
			d.n.Add(int64(k))
			d.t.last = r.now
			d.inPipe = k
			d.bulk = k >= BufSize
			continue
		}
		d.release() // the pipe is empty: small reads need none
		k, err := d.src.read(r.scratch)
		switch {
		case err == unix.EAGAIN:
			d.src.readable = false
			return nil
		case err != nil:
			return err
		case k == 0:
			d.eof = true
			continue
		}
		d.n.Add(int64(k))
		d.t.last = r.now
		switch {
		case k == len(r.scratch):
			d.bulk = true
		case !d.src.hup:
			// A short read drained the socket: bytes that come later
			// bring a new edge. Not so the end of the stream when it came
			// with these bytes: once the peer's end was reported, read on
			// to EOF.
			d.src.readable = false
		}
		w := 0
		if d.dst.writable {
			w, err = d.dst.write(r.scratch[:k])
			if err != nil && err != unix.EAGAIN {
				return err
			}
		}
		if w < k {
			d.pend = bufs.Get().(*[]byte)
			d.off, d.end = 0, copy(*d.pend, r.scratch[w:k])
			return r.block(d.dst)
		}
	}
	if (d.src.readable || d.eof) && !d.queued {
		d.queued = true
		r.again = append(r.again, d)
	}
	return nil
}

// flush writes what d keeps for dst while dst takes it.
func (r *Relay) flush(d *rdir) error {
	for d.inPipe > 0 {
		if !d.dst.writable {
			return nil
		}
		k, err := d.dst.spliceOut(d.p, d.inPipe)
		switch {
		case err == unix.EAGAIN:
			if err := r.block(d.dst); err != nil {
				return err
			}
		case err != nil:
			return err
		}
		d.inPipe -= k
	}
	for d.pend != nil {
		if !d.dst.writable {
			return nil
		}
		k, err := d.dst.write((*d.pend)[d.off:d.end])
		switch {
		case err == unix.EAGAIN:
			if err := r.block(d.dst); err != nil {
				return err
			}
		case err != nil:
			return err
		}
		d.off += k
		if d.off == d.end {
			bufs.Put(d.pend)
			d.pend = nil
		}
	}
	return nil
}

// release gives back an empty pipe.
func (d *rdir) release() {
	if d.p != nil && d.inPipe == 0 {
		pipes.put(d.p)
		d.p = nil
	}
}

// finish ends t: its sockets leave the epoll set and are closed, its
// buffer and pipe go back (a pipe that still holds bytes is closed), and
// the tunnel's caller gets the reason. r.mu is held.
func (r *Relay) finish(t *rtun, reason End) {
	if t.dead {
		return
	}
	t.dead = true
	for i := range t.sides {
		s := &t.sides[i]
		rawClose(s.fd) // the only reference: it leaves the epoll set too
		s.fd = -1
	}
	delete(r.tuns, t.id)
	for i := range t.dirs {
		d := &t.dirs[i]
		if d.pend != nil {
			bufs.Put(d.pend)
			d.pend = nil
		}
		if d.p != nil {
			if d.inPipe > 0 {
				d.p.close() // never carry its bytes into another tunnel
			} else {
				pipes.put(d.p)
			}
			d.p, d.inPipe = nil, 0
		}
	}
	t.done <- reason
}

// sweep ends the tunnels idle for their idle time and sets the next sweep
// while tunnels remain.
func (r *Relay) sweep() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock()
	for _, t := range r.tuns {
		if now-t.last >= t.idle {
			r.finish(t, Idle)
		}
	}
	r.armed = len(r.tuns) > 0
	if r.armed {
		r.file.SetReadDeadline(time.Now().Add(relaySweep))
	} else {
		r.file.SetReadDeadline(time.Time{})
	}
}
