package upstream

import (
	"fmt"

	"golang.org/x/net/ipv4"

	"airlock/dnsd/internal/udpio"
)

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
// Handler's Failed with ErrSend; the queries after it are still sent.
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
		// A query the kernel refuses fails alone: the rest are sent.
		udpio.WriteAll(c.bc, s.msgs, func(i int, err error) {
			if e := s.group[i]; c.cancel(e.p.id, e.p.w, nil) {
				c.socks.pool.h.Failed(e.p.w, c.socks.name, fmt.Errorf("%w: %w", ErrSend, err))
			}
		})
	}
	clear(s.q)
	clear(s.group)
	clear(s.msgs)
	for k := range s.bufs {
		s.bufs[k][0] = nil
	}
	s.q = s.q[:0]
}
