package dnsd

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// udpUpstream sends queries to one upstream over a pool of connected UDP
// sockets, matching answers strictly: the connected socket only receives
// datagrams from the upstream's address and port, and the ID (random per
// query) and the question must match. Each query takes a socket of the
// pool at random, and a socket carries at most maxUses queries before it is
// replaced by a new one, on a new random ephemeral port (Linux randomizes
// the port of an implicitly bound socket). So a query's port is one of
// upSockets random ports, which change all the time: an off-path spoofer
// must hit one of them (about 10 bits out of the ~28,000-port ephemeral
// range) and the 16-bit ID, and a port learned from one query is good for
// at most maxUses-1 others, not known in advance.
//
// The choice, measured with BenchmarkUDPForwarded (CPU time per forwarded
// query, client and upstream included, same run): a socket per query cost
// 100-110 µs of CPU per query against 73-80 µs for a pool (+35%), which
// the forwarding target (1.5x unbound) cannot afford on two shared cores;
// replacing a socket every maxUses queries spreads that cost over 16.
// A UDP reader sends a miss's first attempt itself (asyncUp, same
// rotation); later attempts run on workers and use the workers' own
// sockets (workerSocks, same rotation); this shared pool serves the rest
// (queries over TCP, and misses beyond the worker limit).
type udpUpstream struct {
	addr string
	mu   sync.Mutex
	cur  []*upSock
}

const (
	upSockets = 32 // sockets in use per upstream at a time
	maxUses   = 16 // queries per socket before it is replaced
)

type upSock struct {
	c        *net.UDPConn
	mu       sync.Mutex
	pending  map[uint16]chan *dns.Msg
	uses     int
	inflight int
	retired  bool
}

// take returns a socket with a use left, opening one when needed.
func (u *udpUpstream) take() (*upSock, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.cur) < upSockets {
		s, err := dialUpSock(u.addr)
		if err != nil {
			return nil, err
		}
		u.cur = append(u.cur, s)
	}
	i := rand.IntN(len(u.cur)) // math/rand/v2: per-thread ChaCha8, not guessable from outside
	s := u.cur[i]
	s.mu.Lock()
	s.uses++
	s.inflight++
	if s.uses >= maxUses {
		s.retired = true
		u.cur = append(u.cur[:i], u.cur[i+1:]...)
	}
	s.mu.Unlock()
	return s, nil
}

func dialUpSock(addr string) (*upSock, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return nil, err
	}
	s := &upSock{c: c.(*net.UDPConn), pending: make(map[uint16]chan *dns.Msg)}
	go s.read()
	return s, nil
}

// read hands answers to their waiters until the socket is closed.
func (s *upSock) read() {
	buf := make([]byte, 4096) // we advertise upstreamUDPSize; larger answers come truncated
	for {
		n, err := s.c.Read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. ECONNREFUSED from an earlier query: waiters time out
		}
		m := new(dns.Msg)
		if m.Unpack(buf[:n]) != nil {
			continue
		}
		s.mu.Lock()
		ch := s.pending[m.Id]
		delete(s.pending, m.Id)
		s.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

// release ends one query on s and closes a retired socket when idle.
func (s *upSock) release(id uint16) {
	s.mu.Lock()
	delete(s.pending, id)
	s.inflight--
	done := s.retired && s.inflight == 0
	s.mu.Unlock()
	if done {
		_ = s.c.Close()
	}
}

// exchange sends m (with a fresh random ID) and waits for its answer.
func (u *udpUpstream) exchange(ctx context.Context, m *dns.Msg, deadline time.Time) (*dns.Msg, error) {
	s, err := u.take()
	if err != nil {
		return nil, err
	}
	ch := make(chan *dns.Msg, 1)
	s.mu.Lock()
	for {
		m.Id = dns.Id()
		if _, busy := s.pending[m.Id]; !busy {
			break
		}
	}
	s.pending[m.Id] = ch
	s.mu.Unlock()
	defer s.release(m.Id)
	b, err := m.Pack()
	if err != nil {
		return nil, err
	}
	if _, err := s.c.Write(b); err != nil {
		return nil, err
	}
	t := timerPool.Get().(*time.Timer)
	t.Reset(time.Until(deadline))
	defer func() {
		t.Stop()
		timerPool.Put(t)
	}()
	for {
		select {
		case <-t.C:
			return nil, context.DeadlineExceeded
		case r := <-ch:
			if checkAnswer(m, r) == nil {
				return r, nil
			}
			// Not ours after all (a spoof or a late answer): keep waiting.
			s.mu.Lock()
			s.pending[m.Id] = ch
			s.mu.Unlock()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// timerPool holds stopped timers for upstream waits (since Go 1.23 a
// Reset timer never delivers a stale expiry).
var timerPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// close closes every socket in use.
func (u *udpUpstream) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range u.cur {
		_ = s.c.Close()
	}
	u.cur = nil
}

// workerSocks are the upstream sockets of one worker goroutine (retries,
// joins of identical queries, misses the readers do not send themselves):
// up to ownSlots per upstream address. A worker has one query in flight at a
// time, so it sends on one of its own connected sockets, picked at random,
// and reads the answer there itself: no reader goroutine and no hand-over
// per answer (BenchmarkUDPForwarded: about 15% less CPU per forwarded query
// than the shared pool, and half the latency). Answers are matched as
// strictly as on the shared pool (source address by the connected socket,
// then ID and question; anything else, such as a late answer to an earlier
// query, is read past). Each socket carries maxOwnUses queries and is then
// replaced by one on a new random ephemeral port, so a port is one of few
// open at a time, random per query, and changes all the time.
type workerSocks struct {
	socks map[string]*[ownSlots]*ownSock
}

type ownSock struct {
	c    *net.UDPConn
	uses int
}

const (
	ownSlots   = 4  // sockets per upstream per worker
	maxOwnUses = 16 // queries per socket before it is replaced
)

// exchange sends m (with a fresh random ID) to addr and waits for its
// answer until deadline.
func (w *workerSocks) exchange(ctx context.Context, addr string, m *dns.Msg, deadline time.Time) (*dns.Msg, error) {
	slots, i, err := w.sock(addr)
	if err != nil {
		return nil, err
	}
	c := slots[i].c
	m.Id = dns.Id()
	bp := upBufPool.Get().(*[]byte)
	defer upBufPool.Put(bp)
	b, err := m.PackBuffer(*bp) // the query, then its answer, in one pooled buffer
	if err != nil {
		return nil, err
	}
	_ = c.SetReadDeadline(deadline)
	if _, err := c.Write(b); err != nil {
		w.drop(slots, i)
		return nil, err
	}
	for {
		n, err := c.Read(*bp)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, context.DeadlineExceeded
			}
			w.drop(slots, i) // e.g. ECONNREFUSED: start over on a new socket
			return nil, err
		}
		r := new(dns.Msg)
		if r.Unpack((*bp)[:n]) != nil || checkAnswer(m, r) != nil {
			continue // not ours: a spoof, garbage, or a late answer
		}
		return r, nil
	}
}

// sock picks one of the worker's slots for addr at random and makes sure
// it holds a socket with a use left.
func (w *workerSocks) sock(addr string) (*[ownSlots]*ownSock, int, error) {
	slots := w.socks[addr]
	if slots == nil {
		if w.socks == nil {
			w.socks = make(map[string]*[ownSlots]*ownSock)
		}
		slots = new([ownSlots]*ownSock)
		w.socks[addr] = slots
	}
	i := rand.IntN(ownSlots)
	if s := slots[i]; s != nil && s.uses >= maxOwnUses {
		w.drop(slots, i)
	}
	if slots[i] == nil {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return nil, 0, err
		}
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(ap))
		if err != nil {
			return nil, 0, err
		}
		slots[i] = &ownSock{c: c}
	}
	slots[i].uses++
	return slots, i, nil
}

func (w *workerSocks) drop(slots *[ownSlots]*ownSock, i int) {
	if s := slots[i]; s != nil {
		_ = s.c.Close()
		slots[i] = nil
	}
}

func (w *workerSocks) close() {
	for _, slots := range w.socks {
		for i := range slots {
			w.drop(slots, i)
		}
	}
}

// upBufPool holds read buffers for upstream answers. We advertise
// upstreamUDPSize; larger answers come truncated.
var upBufPool = sync.Pool{New: func() any { b := make([]byte, 4096); return &b }}
