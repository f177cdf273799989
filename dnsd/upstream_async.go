package dnsd

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
)

// The UDP readers forward cache misses without a goroutine per query: the
// reader that got a miss registers it on one of the server's upstream
// sockets and sends it there itself, every miss of one read batch that
// picked the same socket in one sendmmsg; each upstream socket has a
// goroutine that reads answers in batches (recvmmsg), finishes those
// queries (filter, cache, bindings, event) and sends their answers to the
// clients in one sendmmsg per client socket. A miss thus costs a fraction
// of a system call and no goroutine hand-over of its own, where a worker
// per miss (the path before) cost about four and a half system calls and
// two goroutine wake-ups.
//
// Source ports and IDs stay as random as on the workers' sockets: each
// upstream has ownSlots connected sockets, every miss picks one at random
// and gets a random ID unique on it, and a socket carries at most
// maxOwnUses queries before a new one on a new random ephemeral port takes
// its slot. Answers are matched as strictly: the connected socket only
// receives from the upstream's address and port, and the ID and question
// must be those of a query pending on that socket; anything else is read
// past.
//
// Only a query's first attempt runs here. When it times out (upSweeper),
// fails, comes back truncated, SERVFAIL or REFUSED, the query goes on to a
// worker (dispatchSlow) and forward carries on from the next attempt with
// the rest of its time budget, as for any other query.

// asyncUp is the sockets of one upstream for the UDP readers.
type asyncUp struct {
	s     *Server
	addr  *net.UDPAddr
	name  string // for events
	mu    sync.Mutex
	slots [ownSlots]*upConn
}

// upConn is one connected upstream socket and the queries pending on it.
type upConn struct {
	up *asyncUp
	c  *net.UDPConn
	rc syscall.RawConn
	bc *ipv4.PacketConn

	uses int // queries taken (under up.mu)

	mu      sync.Mutex
	pend    [maxOwnUses]pendingQuery
	n       int // pending queries
	retired bool
	closed  bool
}

// pendingQuery is a query waiting for its answer on an upConn. The
// question is kept here so an answer is matched without touching the
// packet, which the sweeper may have handed on meanwhile.
type pendingQuery struct {
	p        *packet
	id       uint16
	qtype    uint16
	name     string
	deadline time.Time
}

// upSend is a miss a reader queued for sending on c: its packed query b
// (in the packet's storage) with ID id.
type upSend struct {
	c  *upConn
	b  []byte
	id uint16
}

// asyncFor returns the reader-side sockets of upstream u, or nil when u
// is not for them (DNS over TLS, or an exchanger other than the real one).
func (s *Server) asyncFor(u Upstream) *asyncUp {
	if u.TLS != nil {
		return nil
	}
	if _, ok := s.fwd.x.(*netExchanger); !ok {
		return nil
	}
	if v, ok := s.ups.Load(u.Addr); ok {
		return v.(*asyncUp)
	}
	ap, err := netip.ParseAddrPort(u.Addr)
	if err != nil {
		return nil
	}
	v, _ := s.ups.LoadOrStore(u.Addr, &asyncUp{s: s, addr: net.UDPAddrFromAddrPort(ap), name: u.String()})
	s.sweepOnce.Do(func() { go s.upSweeper() })
	return v.(*asyncUp)
}

// sendMiss begins the exchange for a cache miss and queues its first
// attempt in sends; false when the miss must go to a worker instead (an
// identical query in flight to join, an upstream not for this path).
func (s *Server) sendMiss(p *packet, sends []upSend) ([]upSend, bool) {
	q := &p.q
	ups := s.fwd.upstreamsFor(q.sb.Policy)
	if len(ups) == 0 || s.ctx.Err() != nil {
		return sends, false
	}
	at := s.fwd.firstAttempt()
	au := s.asyncFor(ups[at.start%len(ups)])
	if au == nil {
		return sends, false
	}
	c := s.fwd.beginNew(q.ckey)
	if c == nil {
		return sends, false // an identical query is in flight: a worker joins it
	}
	m := c.query(q.ckey, q.req.CheckingDisabled)
	b, err := m.PackBuffer(p.upq[:])
	if err != nil || &b[0] != &p.upq[0] {
		q.call, q.at = c, at // a worker runs the exchange from the start
		s.dispatchSlow(p)
		return sends, true
	}
	dl := time.Now().Add(s.fwd.attempt)
	if dl.After(at.end) {
		dl = at.end
	}
	at.next = 1
	q.call, q.at = c, at
	// Once registered, the packet is the pending table's: only b and the
	// ID are the reader's.
	uc, id, err := au.register(p, b, q.ckey.name, q.ckey.qtype, dl)
	if err != nil {
		q.at.next = 0 // not sent: a worker runs the exchange from the start
		s.dispatchSlow(p)
		return sends, true
	}
	return append(sends, upSend{c: uc, b: b, id: id}), true
}

// register picks a socket for a query at random, replacing it first when
// it has carried maxOwnUses queries, and makes the query pending there
// under a random ID no other pending query there has, which it writes into
// the packed query b.
func (au *asyncUp) register(p *packet, b []byte, name string, qtype uint16, deadline time.Time) (*upConn, uint16, error) {
	au.mu.Lock()
	i := rand.IntN(ownSlots) // math/rand/v2: per-thread ChaCha8, not guessable from outside
	c := au.slots[i]
	if c == nil || c.uses >= maxOwnUses {
		if c != nil {
			c.retire()
		}
		var err error
		if c, err = au.dial(); err != nil {
			au.slots[i] = nil
			au.mu.Unlock()
			return nil, 0, err
		}
		au.slots[i] = c
	}
	c.uses++
	au.mu.Unlock()

	c.mu.Lock()
	defer c.mu.Unlock()
	id := uint16(rand.Uint32())
	for c.pendingIndex(id) >= 0 {
		id = uint16(rand.Uint32())
	}
	binary.BigEndian.PutUint16(b, id)
	for j := range c.pend {
		if c.pend[j].p == nil {
			c.pend[j] = pendingQuery{p: p, id: id, qtype: qtype, name: name, deadline: deadline}
			c.n++
			if s := au.s; s.upPending.Add(1) == 1 {
				select { // wake the sweeper
				case s.upWake <- struct{}{}:
				default:
				}
			}
			return c, id, nil
		}
	}
	return nil, 0, errors.New("dnsd: upstream socket full") // cannot happen: uses <= len(pend)
}

func (c *upConn) pendingIndex(id uint16) int {
	for j := range c.pend {
		if c.pend[j].p != nil && c.pend[j].id == id {
			return j
		}
	}
	return -1
}

// dial opens a socket on a new random ephemeral port and starts its reader.
func (au *asyncUp) dial() (*upConn, error) {
	conn, err := net.DialUDP("udp", nil, au.addr)
	if err != nil {
		return nil, err
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, err
	}
	c := &upConn{up: au, c: conn, rc: rc, bc: ipv4.NewPacketConn(conn)}
	s := au.s
	s.upMu.Lock()
	if s.ctx.Err() != nil { // closed (closeUpConns has run or will not see c)
		s.upMu.Unlock()
		conn.Close()
		return nil, net.ErrClosed
	}
	if s.upConns == nil {
		s.upConns = make(map[*upConn]struct{})
	}
	s.upConns[c] = struct{}{}
	s.upMu.Unlock()
	go c.serve()
	return c, nil
}

// retire takes no more queries on c; it closes once none is pending.
func (c *upConn) retire() {
	c.mu.Lock()
	c.retired = true
	last := c.n == 0
	c.mu.Unlock()
	if last {
		c.close()
	}
}

func (c *upConn) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	_ = c.c.Close()
	s := c.up.s
	s.upMu.Lock()
	delete(s.upConns, c)
	s.upMu.Unlock()
}

// take removes the pending query with id and returns its packet (nil when
// there is none).
func (c *upConn) take(id uint16) *packet {
	return c.takeIf(id, func(*pendingQuery) bool { return true })
}

func (c *upConn) takeIf(id uint16, ok func(*pendingQuery) bool) *packet {
	c.mu.Lock()
	j := c.pendingIndex(id)
	if j < 0 || !ok(&c.pend[j]) {
		c.mu.Unlock()
		return nil
	}
	p := c.pend[j].p
	c.pend[j] = pendingQuery{}
	c.n--
	c.up.s.upPending.Add(-1)
	last := c.retired && c.n == 0
	c.mu.Unlock()
	if last {
		c.close()
	}
	return p
}

// expired removes the pending queries whose attempt is over at now.
func (c *upConn) expired(now time.Time, out []*packet) []*packet {
	c.mu.Lock()
	for j := range c.pend {
		if pq := &c.pend[j]; pq.p != nil && !now.Before(pq.deadline) {
			pq.p.q.at.last = result{upstream: c.up.name, err: errAttemptTimeout}
			out = append(out, pq.p)
			*pq = pendingQuery{}
			c.n--
			c.up.s.upPending.Add(-1)
		}
	}
	last := c.retired && c.n == 0
	c.mu.Unlock()
	if last {
		c.close()
	}
	return out
}

// flushUp sends the queued misses, one sendmmsg per socket; misses that
// could not be sent go on to workers. msgs and bufs are the caller's
// storage (udpBatch each).
func (s *Server) flushUp(sends []upSend, msgs []ipv4.Message, bufs *[udpBatch][1][]byte) {
	var ids [udpBatch]uint16
	for i := range sends {
		c := sends[i].c
		if c == nil {
			continue
		}
		msgs = msgs[:0]
		for j := i; j < len(sends); j++ {
			if sends[j].c != c {
				continue
			}
			k := len(msgs)
			bufs[k][0], ids[k] = sends[j].b, sends[j].id
			msgs = append(msgs, ipv4.Message{Buffers: bufs[k][:]})
			sends[j] = upSend{}
		}
		sent := 0
		for sent < len(msgs) {
			n, err := c.bc.WriteBatch(msgs[sent:], 0)
			if err != nil {
				s.log.Debug("dns upstream write batch", "upstream", c.up.name, "err", err)
				break
			}
			sent += n
		}
		for k := sent; k < len(msgs); k++ {
			if p := c.take(ids[k]); p != nil {
				p.q.at.last = result{upstream: c.up.name, err: errors.New("upstream send failed")}
				s.dispatchSlow(p)
			}
		}
	}
	for k := range bufs {
		bufs[k][0] = nil
	}
}

// upReader is the storage an upstream socket's reader uses.
type upReader struct {
	rd   *mmsgReader
	bufs [][]byte
	lens [udpBatch]int
	done []*packet
	msgs []ipv4.Message
}

// upReadBatch is how many answers a socket's reader takes per recvmmsg: a
// few (a socket has at most maxOwnUses queries pending, spread out in
// time), so that the buffers of the sockets open during an upstream outage
// stay small.
const upReadBatch = 4

var upReaderPool = sync.Pool{New: func() any {
	r := &upReader{rd: newMMsgReader(nil), done: make([]*packet, 0, upReadBatch), msgs: make([]ipv4.Message, 0, upReadBatch)}
	for range upReadBatch {
		r.bufs = append(r.bufs, make([]byte, 4096)) // we advertise upstreamUDPSize; larger answers come truncated
	}
	return r
}}

// serve reads answers on c until it is closed.
func (c *upConn) serve() {
	r := upReaderPool.Get().(*upReader)
	defer upReaderPool.Put(r)
	r.rd.rc = c.rc
	s := c.up.s
	for {
		n, err := r.rd.readBufs(r.bufs, r.lens[:])
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. ECONNREFUSED after an earlier query: its attempt times out
		}
		r.done = r.done[:0]
		for i := range n {
			if p := s.upAnswer(c, r.bufs[i][:r.lens[i]]); p != nil {
				r.done = append(r.done, p)
			}
		}
		r.msgs = s.sendReplies(r.done, r.msgs)
	}
}

// upAnswer matches an answer read on c to its pending query and finishes
// the query; it returns the packet when its reply waits in it to be sent.
func (s *Server) upAnswer(c *upConn, b []byte) *packet {
	if len(b) < 12 || binary.BigEndian.Uint16(b[2:])&0x8000 == 0 {
		return nil // not a response
	}
	r := new(dns.Msg)
	if r.Unpack(b) != nil || len(r.Question) != 1 {
		return nil
	}
	p := c.takeIf(r.Id, func(pq *pendingQuery) bool {
		return r.Question[0].Qtype == pq.qtype && strings.EqualFold(r.Question[0].Name, pq.name)
	})
	if p == nil {
		return nil // not ours: a spoof, garbage, or a late answer
	}
	q := &p.q
	if r.Truncated || retryable(r) {
		q.at.last, q.at.tcp = result{msg: r, upstream: c.up.name}, r.Truncated
		s.dispatchSlow(p)
		return nil
	}
	call := q.call
	q.call = nil
	call.res = result{msg: r, upstream: c.up.name}
	res := s.fwd.complete(q.ckey, call)
	p.batched, p.queued = true, false
	if s.forwarded(q, res) {
		s.runChain(q, forwardStep+1)
	}
	s.writeAndLog(q)
	if !p.queued {
		packetPool.Put(p)
		return nil
	}
	return p
}

// sendReplies sends the answers queued in done, one sendmmsg per client
// socket, and returns the packets to the pool.
func (s *Server) sendReplies(done []*packet, msgs []ipv4.Message) []ipv4.Message {
	for i, p := range done {
		if p == nil {
			continue
		}
		bc := p.bc
		msgs = msgs[:0]
		for j := i; j < len(done); j++ {
			if p := done[j]; p != nil && p.bc == bc {
				var oob []byte
				if p.dst.Is4() {
					oob = (*udpWriter)(p).replyOOB()
				}
				p.bufs[0] = p.out
				msgs = append(msgs, ipv4.Message{Buffers: p.bufs[:], OOB: oob, Addr: p.replyAddr()})
			}
		}
		for sent := 0; sent < len(msgs); {
			k, err := bc.WriteBatch(msgs[sent:], 0)
			if err != nil {
				s.log.Debug("dns write batch", "err", err)
				break
			}
			sent += k
		}
		for j := i; j < len(done); j++ {
			if p := done[j]; p != nil && p.bc == bc {
				done[j] = nil
				packetPool.Put(p)
			}
		}
	}
	for i := range msgs {
		msgs[i] = ipv4.Message{}
	}
	return msgs[:0]
}

// upSweepEvery is how often pending first attempts are checked for their
// deadline.
const upSweepEvery = 10 * time.Millisecond

// upSweeper hands first attempts whose time is up to workers, which go on
// with the next attempt. It ticks only while some are pending.
func (s *Server) upSweeper() {
	t := time.NewTicker(upSweepEvery)
	defer t.Stop()
	var conns []*upConn
	var late []*packet
	for {
		if s.upPending.Load() == 0 {
			t.Stop()
			select {
			case <-s.ctx.Done():
				s.closeUpConns()
				return
			case <-s.upWake:
			}
			t.Reset(upSweepEvery)
		}
		select {
		case <-s.ctx.Done():
			s.closeUpConns()
			return
		case now := <-t.C:
			conns = conns[:0]
			s.upMu.Lock()
			for c := range s.upConns {
				conns = append(conns, c)
			}
			s.upMu.Unlock()
			late = late[:0]
			for _, c := range conns {
				late = c.expired(now, late)
			}
			for _, p := range late {
				s.dispatchSlow(p)
			}
			clear(late)
		}
	}
}

var errAttemptTimeout = errors.New("upstream did not answer in time")

// closeUpConns closes every upstream socket of the readers.
func (s *Server) closeUpConns() {
	s.upMu.Lock()
	conns := make([]*upConn, 0, len(s.upConns))
	for c := range s.upConns {
		conns = append(conns, c)
	}
	s.upMu.Unlock()
	for _, c := range conns {
		c.close()
	}
}
