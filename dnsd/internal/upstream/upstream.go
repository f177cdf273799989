package upstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"

	"airlock/dnsd/internal/udpio"
)

const (
	// Slots is how many sockets each upstream has open at a time.
	Slots = 4
	// MaxUses is how many queries a socket carries before it is replaced.
	MaxUses = 16
	// MaxAnswer is the largest answer read; dnsd advertises less upstream,
	// so larger answers come truncated.
	MaxAnswer = 4096

	sweepEvery = 10 * time.Millisecond
	// readBatch is how many answers a socket's reader takes per recvmmsg:
	// a few (at most MaxUses are pending, spread out in time), so that the
	// buffers of the sockets open during an upstream outage stay small.
	readBatch = 4
)

var (
	// ErrTimeout is a query's error when its deadline passed unanswered.
	ErrTimeout = errors.New("upstream did not answer in time")
	// ErrSend is a query's error when it could not be sent.
	ErrSend = errors.New("upstream send failed")
)

// NewID returns a random query ID (math/rand/v2: a per-thread ChaCha8
// stream seeded by the kernel, not guessable from outside).
func NewID() uint16 { return uint16(rand.Uint32()) }

// newID is NewID, replaced by tests that need colliding IDs.
var newID = NewID

// Answer is a pending query's W with its matched answer.
type Answer[T comparable] struct {
	W        T
	Msg      *dns.Msg
	Upstream string // the upstream's address, for events
}

// Handler gets back what Register made pending, exactly once per query.
type Handler[T comparable] interface {
	// Answered gets the matched answers of one read on a socket, on that
	// socket's reader goroutine. The batch is only valid during the call.
	Answered(batch []Answer[T])
	// Failed gets a query that ended without an answer: ErrTimeout,
	// ErrSend (wrapped), or net.ErrClosed when the pool closed.
	Failed(w T, upstream string, err error)
}

// Pool is the sockets of every upstream a server asks.
type Pool[T comparable] struct {
	h       Handler[T]
	ups     sync.Map // address -> *Socks[T]
	readers sync.Pool
	pending atomic.Int64  // queries pending on every socket
	wake    chan struct{} // the sweeper's wake-up when pending leaves 0
	stop    chan struct{}
	sweep   sync.Once

	mu     sync.Mutex
	conns  map[*Sock[T]]struct{}
	closed bool
}

// NewPool returns a pool whose registered queries end at h.
func NewPool[T comparable](h Handler[T]) *Pool[T] {
	p := &Pool[T]{h: h, wake: make(chan struct{}, 1), stop: make(chan struct{}), conns: make(map[*Sock[T]]struct{})}
	p.readers.New = func() any {
		r := &reader[T]{rd: udpio.NewReader(nil), batch: make([]Answer[T], 0, readBatch)}
		for i := range r.bufs {
			r.bufs[i] = make([]byte, MaxAnswer)
		}
		return r
	}
	return p
}

// Socks returns the sockets of the upstream at addr (ip:port).
func (p *Pool[T]) Socks(addr string) (*Socks[T], error) {
	if v, ok := p.ups.Load(addr); ok {
		return v.(*Socks[T]), nil
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %w", addr, err)
	}
	v, _ := p.ups.LoadOrStore(addr, &Socks[T]{pool: p, addr: net.UDPAddrFromAddrPort(ap), name: addr})
	p.sweep.Do(func() { go p.sweeper() })
	return v.(*Socks[T]), nil
}

// Close closes every socket; the queries pending on them fail with
// net.ErrClosed. Safe to call more than once.
func (p *Pool[T]) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	conns := make([]*Sock[T], 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	close(p.stop)
	for _, c := range conns {
		c.close()
		c.fail(never, net.ErrClosed)
	}
}

// Socks is the connected sockets of one upstream.
type Socks[T comparable] struct {
	pool  *Pool[T]
	addr  *net.UDPAddr
	name  string
	mu    sync.Mutex
	slots [Slots]*Sock[T]
}

// Name is the upstream's address.
func (s *Socks[T]) Name() string { return s.name }

// Sock is one connected socket and the queries pending on it.
type Sock[T comparable] struct {
	socks *Socks[T]
	c     *net.UDPConn
	rc    syscall.RawConn
	bc    *ipv4.PacketConn

	uses int // queries taken (under socks.mu)

	mu      sync.Mutex
	pend    [MaxUses]pending[T]
	n       int // pending queries
	retired bool
	closed  bool
}

// pending is a query waiting for its answer: W for the Handler, or ch for
// a blocked Exchange. The question is kept here so that an answer is
// matched without touching the caller's storage.
type pending[T comparable] struct {
	used     bool
	id       uint16
	qtype    uint16
	name     string
	deadline time.Time
	w        T
	ch       chan reply
}

type reply struct {
	msg *dns.Msg
	err error
}

// register makes e pending on one of s's sockets and writes its ID into
// the packed query b (see Sock.register). The socket is one slot's picked
// at random; a socket that has carried MaxUses queries (or none) is first
// replaced by one on a new random ephemeral port. Taking the socket and
// registering on it happen under s.mu, so a socket is never retired (and
// closed, having nothing pending) between the two.
func (s *Socks[T]) register(e pending[T], b []byte) (*Sock[T], uint16, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := rand.IntN(Slots)
	c := s.slots[i]
	if c == nil || c.uses >= MaxUses {
		if c != nil {
			c.retire()
		}
		var err error
		if c, err = s.dial(); err != nil {
			s.slots[i] = nil
			return nil, 0, err
		}
		s.slots[i] = c
	}
	c.uses++
	id, err := c.register(e, b)
	return c, id, err
}

// dial opens a socket on a new random ephemeral port and starts its reader.
func (s *Socks[T]) dial() (*Sock[T], error) {
	conn, err := net.DialUDP("udp", nil, s.addr)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", s.name, err)
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("upstream %s: %w", s.name, err)
	}
	c := &Sock[T]{socks: s, c: conn, rc: rc, bc: ipv4.NewPacketConn(conn)}
	p := s.pool
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		conn.Close()
		return nil, net.ErrClosed
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	go c.serve()
	return c, nil
}

// Pending is a registered query, to be sent with a Sender.
type Pending[T comparable] struct {
	c  *Sock[T]
	id uint16
	w  T
}

// Register makes w pending for the answer to the packed query b, whose
// question is (name, qtype), on one of s's sockets, under a random ID it
// writes into b. The caller sends b with a Sender; the pool's Handler
// then gets w back once (Answered or Failed). deadline ends the wait.
func (s *Socks[T]) Register(w T, b []byte, name string, qtype uint16, deadline time.Time) (Pending[T], error) {
	if len(b) < 12 {
		return Pending[T]{}, errors.New("upstream: query shorter than a header")
	}
	c, id, err := s.register(pending[T]{w: w, name: name, qtype: qtype, deadline: deadline}, b)
	if err != nil {
		return Pending[T]{}, err
	}
	return Pending[T]{c: c, id: id, w: w}, nil
}

// register makes e pending on c under a random ID that no other query
// pending on c has, and writes the ID into the packed query b.
func (c *Sock[T]) register(e pending[T], b []byte) (uint16, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	id := newID()
	for c.index(id) >= 0 {
		id = newID()
	}
	for j := range c.pend {
		if !c.pend[j].used {
			e.used, e.id = true, id
			c.pend[j] = e
			c.n++
			binary.BigEndian.PutUint16(b, id)
			if p := c.socks.pool; p.pending.Add(1) == 1 {
				select { // wake the sweeper
				case p.wake <- struct{}{}:
				default:
				}
			}
			return id, nil
		}
	}
	return 0, errors.New("upstream: socket full") // cannot happen: uses <= MaxUses
}

func (c *Sock[T]) index(id uint16) int {
	for j := range c.pend {
		if c.pend[j].used && c.pend[j].id == id {
			return j
		}
	}
	return -1
}

// remove takes pending query j off c (c.mu held) and reports whether c,
// retired, has none left and must close.
func (c *Sock[T]) remove(j int) bool {
	c.pend[j] = pending[T]{}
	c.n--
	c.socks.pool.pending.Add(-1)
	return c.retired && c.n == 0
}

// matchAnswer removes and returns the pending query the answer r matches
// strictly (see the package doc).
func (c *Sock[T]) matchAnswer(r *dns.Msg) (pending[T], bool) {
	c.mu.Lock()
	j := c.index(r.Id)
	if j < 0 || !answers(r, c.pend[j].name, c.pend[j].qtype) {
		c.mu.Unlock()
		return pending[T]{}, false
	}
	e := c.pend[j]
	last := c.remove(j)
	c.mu.Unlock()
	if last {
		c.close()
	}
	return e, true
}

// cancel removes the pending query (id, w, ch) when it is still pending;
// false when its answer or failure is already on its way.
func (c *Sock[T]) cancel(id uint16, w T, ch chan reply) bool {
	c.mu.Lock()
	j := c.index(id)
	if j < 0 || c.pend[j].w != w || c.pend[j].ch != ch {
		c.mu.Unlock()
		return false
	}
	last := c.remove(j)
	c.mu.Unlock()
	if last {
		c.close()
	}
	return true
}

// never is a time after every deadline.
var never = time.Unix(1<<62, 0)

// fail removes the pending queries whose deadline is not after now and
// hands them on with err.
func (c *Sock[T]) fail(now time.Time, err error) {
	var out [MaxUses]pending[T]
	k := 0
	c.mu.Lock()
	last := false
	for j := range c.pend {
		if c.pend[j].used && !now.Before(c.pend[j].deadline) {
			out[k] = c.pend[j]
			k++
			last = c.remove(j)
		}
	}
	c.mu.Unlock()
	if last {
		c.close()
	}
	for _, e := range out[:k] {
		c.deliver(e, reply{err: err})
	}
}

// deliver hands a query's end to whoever waits for it (not for answers
// to Register's queries, which go to Answered in batches).
func (c *Sock[T]) deliver(e pending[T], r reply) {
	if e.ch != nil {
		e.ch <- r
		return
	}
	c.socks.pool.h.Failed(e.w, c.socks.name, r.err)
}

// retire takes no more queries on c; it closes once none is pending.
func (c *Sock[T]) retire() {
	c.mu.Lock()
	c.retired = true
	last := c.n == 0
	c.mu.Unlock()
	if last {
		c.close()
	}
}

func (c *Sock[T]) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	_ = c.c.Close()
	p := c.socks.pool
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// reader is the storage of a socket's reader goroutine.
type reader[T comparable] struct {
	rd    *udpio.Reader
	bufs  [readBatch][]byte
	lens  [readBatch]int
	batch []Answer[T]
}

// serve reads answers on c until it is closed.
func (c *Sock[T]) serve() {
	p := c.socks.pool
	r := p.readers.Get().(*reader[T])
	defer p.readers.Put(r)
	r.rd.SetConn(c.rc)
	for {
		n, err := r.rd.Read(r.bufs[:], r.lens[:])
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. ECONNREFUSED after an earlier query: its wait times out
		}
		r.batch = r.batch[:0]
		for i := range n {
			e, m, ok := c.match(r.bufs[i][:r.lens[i]])
			switch {
			case !ok:
			case e.ch != nil:
				e.ch <- reply{msg: m}
			default:
				r.batch = append(r.batch, Answer[T]{W: e.w, Msg: m, Upstream: c.socks.name})
			}
		}
		if len(r.batch) > 0 {
			p.h.Answered(r.batch)
			clear(r.batch)
		}
	}
}

// match parses a datagram read on c and removes the pending query it
// answers; false for anything that answers none.
func (c *Sock[T]) match(b []byte) (pending[T], *dns.Msg, bool) {
	if len(b) < 12 || binary.BigEndian.Uint16(b[2:])&0x8000 == 0 {
		return pending[T]{}, nil, false // not a response
	}
	m := new(dns.Msg)
	if m.Unpack(b) != nil {
		return pending[T]{}, nil, false
	}
	e, ok := c.matchAnswer(m)
	return e, m, ok
}

// answers reports whether r is a response whose one question is (name,
// case aside, qtype, class IN).
func answers(r *dns.Msg, name string, qtype uint16) bool {
	return r.Response && len(r.Question) == 1 && r.Question[0].Qtype == qtype &&
		r.Question[0].Qclass == dns.ClassINET && strings.EqualFold(r.Question[0].Name, name)
}

// Check makes sure r answers the query q (same ID, a response, the same
// one question), for answers that come over TCP or TLS.
func Check(q, r *dns.Msg) error {
	switch {
	case r == nil:
		return errors.New("empty answer")
	case r.Id != q.Id || !r.Response:
		return errors.New("answer id mismatch")
	case len(q.Question) != 1 || !answers(r, q.Question[0].Name, q.Question[0].Qtype):
		return errors.New("answer for another question")
	}
	return nil
}

var (
	bufPool  = sync.Pool{New: func() any { b := make([]byte, 512); return &b }}
	chanPool = sync.Pool{New: func() any { return make(chan reply, 1) }}
)

// Exchange sends m (one question) on one of s's sockets under a random ID
// (set in m) and waits for its answer until deadline or until ctx ends.
func (s *Socks[T]) Exchange(ctx context.Context, m *dns.Msg, deadline time.Time) (*dns.Msg, error) {
	if len(m.Question) != 1 {
		return nil, errors.New("upstream: a query has one question")
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	b, err := m.PackBuffer(*bp)
	if err != nil {
		return nil, err
	}
	ch := chanPool.Get().(chan reply)
	var zero T
	c, id, err := s.register(pending[T]{ch: ch, name: m.Question[0].Name, qtype: m.Question[0].Qtype, deadline: deadline}, b)
	if err != nil {
		chanPool.Put(ch)
		return nil, err
	}
	m.Id = id
	var r reply
	if _, err := c.c.Write(b); err != nil {
		r.err = fmt.Errorf("%w: %w", ErrSend, err)
	} else {
		select {
		case r = <-ch:
			chanPool.Put(ch)
			return r.msg, r.err
		case <-ctx.Done():
			r.err = ctx.Err()
		}
	}
	if !c.cancel(id, zero, ch) {
		<-ch // its end was on its way: take it, so ch is empty again
	}
	chanPool.Put(ch)
	return nil, r.err
}

// Sender sends registered queries, one sendmmsg per socket. A Sender is
// used by one goroutine; its zero value is ready.
type Sender[T comparable] struct {
	q     []queued[T]
	group []queued[T]
	msgs  []ipv4.Message
	bufs  [udpio.Batch][1][]byte
}

type queued[T comparable] struct {
	p Pending[T]
	b []byte
}

// Add queues the packed query b that Register made pending as p. b must
// stay unchanged until Flush.
func (s *Sender[T]) Add(p Pending[T], b []byte) {
	if len(s.q) == len(s.bufs) {
		s.Flush()
	}
	s.q = append(s.q, queued[T]{p: p, b: b})
}

// Flush sends what Add queued. A query that could not be sent goes to the
// Handler's Failed with ErrSend.
func (s *Sender[T]) Flush() {
	for i := range s.q {
		c := s.q[i].p.c
		if c == nil {
			continue
		}
		s.msgs, s.group = s.msgs[:0], s.group[:0]
		for j := i; j < len(s.q); j++ {
			if s.q[j].p.c != c {
				continue
			}
			k := len(s.msgs)
			s.bufs[k][0] = s.q[j].b
			s.msgs = append(s.msgs, ipv4.Message{Buffers: s.bufs[k][:]})
			s.group = append(s.group, s.q[j])
			s.q[j].p.c = nil
		}
		sent := 0
		var err error
		for sent < len(s.msgs) {
			var n int
			if n, err = c.bc.WriteBatch(s.msgs[sent:], 0); err != nil {
				break
			}
			sent += n
		}
		for _, e := range s.group[sent:] {
			if c.cancel(e.p.id, e.p.w, nil) {
				c.socks.pool.h.Failed(e.p.w, c.socks.name, fmt.Errorf("%w: %w", ErrSend, err))
			}
		}
	}
	clear(s.q)
	clear(s.group)
	clear(s.msgs)
	for k := range s.bufs {
		s.bufs[k][0] = nil
	}
	s.q = s.q[:0]
}

// sweeper fails the queries whose deadline passed. It ticks only while
// some are pending.
func (p *Pool[T]) sweeper() {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	var conns []*Sock[T]
	for {
		if p.pending.Load() == 0 {
			t.Stop()
			select {
			case <-p.stop:
				return
			case <-p.wake:
			}
			t.Reset(sweepEvery)
		}
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			conns = conns[:0]
			p.mu.Lock()
			for c := range p.conns {
				conns = append(conns, c)
			}
			p.mu.Unlock()
			for _, c := range conns {
				c.fail(now, ErrTimeout)
			}
			clear(conns)
		}
	}
}
