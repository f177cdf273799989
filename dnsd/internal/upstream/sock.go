package upstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"

	"airlock/dnsd/internal/udpio"
)

// Socks is the connected sockets of one upstream.
type Socks[T comparable] struct {
	pool  *Pool[T]
	addr  *net.UDPAddr
	name  string
	mu    sync.Mutex
	slots [Slots]*sock[T]
}

// sock is one connected socket and the queries pending on it.
type sock[T comparable] struct {
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
// the packed query b (see sock.register). The socket is one slot's picked
// at random; a socket that has carried MaxUses queries (or none) is first
// replaced by one on a new random ephemeral port. Taking the socket and
// registering on it happen under s.mu, so a socket is never retired (and
// closed, having nothing pending) between the two.
func (s *Socks[T]) register(e pending[T], b []byte) (*sock[T], uint16, error) {
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
func (s *Socks[T]) dial() (*sock[T], error) {
	conn, err := net.DialUDP("udp", nil, s.addr)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", s.name, err)
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("upstream %s: %w", s.name, err)
	}
	c := &sock[T]{socks: s, c: conn, rc: rc, bc: ipv4.NewPacketConn(conn)}
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
	c  *sock[T]
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
func (c *sock[T]) register(e pending[T], b []byte) (uint16, error) {
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

func (c *sock[T]) index(id uint16) int {
	for j := range c.pend {
		if c.pend[j].used && c.pend[j].id == id {
			return j
		}
	}
	return -1
}

// remove takes pending query j off c (c.mu held) and reports whether c,
// retired, has none left and must close.
func (c *sock[T]) remove(j int) bool {
	c.pend[j] = pending[T]{}
	c.n--
	c.socks.pool.pending.Add(-1)
	return c.retired && c.n == 0
}

// matchAnswer removes and returns the pending query the answer r matches
// strictly (see the package doc).
func (c *sock[T]) matchAnswer(r *dns.Msg) (pending[T], bool) {
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
func (c *sock[T]) cancel(id uint16, w T, ch chan reply) bool {
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
func (c *sock[T]) fail(now time.Time, err error) {
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
func (c *sock[T]) deliver(e pending[T], r reply) {
	if e.ch != nil {
		e.ch <- r
		return
	}
	c.socks.pool.h.Failed(e.w, c.socks.name, r.err)
}

// retire takes no more queries on c; it closes once none is pending.
func (c *sock[T]) retire() {
	c.mu.Lock()
	c.retired = true
	last := c.n == 0
	c.mu.Unlock()
	if last {
		c.close()
	}
}

func (c *sock[T]) close() {
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
func (c *sock[T]) serve() {
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
func (c *sock[T]) match(b []byte) (pending[T], *dns.Msg, bool) {
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
