package dnsd

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
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
// 100-110 µs of CPU per query against 73-80 µs for this pool (+35%), which
// the forwarding target (1.5x unbound) cannot afford on two shared cores;
// replacing a socket every maxUses queries spreads that cost over 16.
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
