package dnsd

import (
	"sync"

	"golang.org/x/net/ipv4"

	"airlock/dnsd/internal/udpio"
)

// replies is a batch of answers to send on one UDP socket: the reading
// goroutine's answers that needed no network, and the answers of cache
// misses an upstream socket's reader resumed. Answers to IPv4 clients go
// through a udpio.Writer (one sendmmsg, no allocation per answer), any
// other through the socket's WriteBatch; an answer the kernel refuses is
// skipped, never the rest of the batch, and every one not sent is logged.
type replies struct {
	s      *Server
	wr     *udpio.Writer
	rest   []ipv4.Message
	failed func(i int, err error) // made once: no closure per flush
}

func newReplies(s *Server) *replies {
	b := &replies{s: s, rest: make([]ipv4.Message, 0, udpBatch)}
	b.wr = udpio.NewWriter(func(n int, err error) { b.s.repliesDropped(n, err) })
	b.failed = func(_ int, err error) { b.s.repliesDropped(1, err) }
	return b
}

// add queues p's answer. p's answer and reply storage must stay unchanged
// until flush.
func (b *replies) add(p *packet) {
	var oob []byte
	if p.dst.Is4() {
		oob = (*udpWriter)(p).replyOOB()
	}
	if b.wr.Add(p.out, oob, p.src) {
		return
	}
	p.bufs[0] = p.out
	b.rest = append(b.rest, ipv4.Message{Buffers: p.bufs[:], OOB: oob, Addr: p.replyAddr()})
}

// flush sends what add queued, on us.
func (b *replies) flush(us *udpSock) {
	b.wr.Flush(us.rc)
	if len(b.rest) > 0 {
		udpio.WriteAll(us.bc, b.rest, b.failed)
		clear(b.rest)
		b.rest = b.rest[:0]
	}
}

// repliesDropped logs answers the kernel did not send: their clients see
// a timeout, and the operator sees why.
func (s *Server) repliesDropped(n int, err error) {
	s.log.Warn("dns: answers not sent", "count", n, logErr, err)
}

// replyPool holds the replies of sendReplies calls (the upstream sockets'
// readers).
var replyPool sync.Pool

func getReplies(s *Server) *replies {
	if b, ok := replyPool.Get().(*replies); ok {
		b.s = s
		return b
	}
	return newReplies(s)
}
