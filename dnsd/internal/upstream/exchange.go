package upstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/miekg/dns"
)

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
