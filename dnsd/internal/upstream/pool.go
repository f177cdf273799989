package upstream

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"airlock/dnsd/internal/udpio"
)

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
	conns  map[*sock[T]]struct{}
	closed bool
}

// NewPool returns a pool whose registered queries end at h.
func NewPool[T comparable](h Handler[T]) *Pool[T] {
	p := &Pool[T]{h: h, wake: make(chan struct{}, 1), stop: make(chan struct{}), conns: make(map[*sock[T]]struct{})}
	p.readers.New = func() any {
		r := &reader[T]{rd: udpio.NewReader(nil), batch: make([]Answer[T], 0, readBatch)}
		for i := range r.bufs {
			r.bufs[i] = make([]byte, maxAnswer)
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
	conns := make([]*sock[T], 0, len(p.conns))
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

// sweeper fails the queries whose deadline passed. It ticks only while
// some are pending.
func (p *Pool[T]) sweeper() {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	var conns []*sock[T]
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
