package proxy

import (
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"airlock/audit"
)

// Attributor finds the process in a sandbox behind a connection: the
// serve wiring asks the sandbox's agent which process holds the socket
// (local is the sandbox's end, remote the address it connected to).
// Attribute must not block; the Owner it returns must be answered within
// a bound of the attributor's. The flow's records wait for the answer
// (off the connection's path: they are queued, in order); only a refused
// connection is held for it, at most denyWait, so that the client's
// socket still exists when the agent looks.
type Attributor interface {
	Attribute(sandboxID, proto string, local, remote netip.AddrPort) *audit.Owner
}

// denyWait bounds how long a refusal waits for the flow's attribution.
const denyWait = 50 * time.Millisecond

// flowAttr queues a flow's records until its attribution is known.
type flowAttr struct {
	owner *audit.Owner
	mu    sync.Mutex
	ready bool
	a     audit.Attribution
	queue []audit.Event
}

// attribute starts the lookup of the process behind f's connection c.
func (p *Proxy) attribute(f *flow, c net.Conn) {
	if p.cfg.Attributor == nil || f.sb.ID == "" {
		return
	}
	remote := f.origDst
	if !remote.IsValid() {
		remote, _ = addrPort(c.LocalAddr())
	}
	fa := &flowAttr{owner: p.cfg.Attributor.Attribute(f.sb.ID, "tcp", f.src, remote)}
	f.attr = fa
	fa.owner.Then(func(a audit.Attribution) { fa.flush(p.cfg.Emitter, a) })
}

// emitFlow emits one of f's records with its attribution, or queues it
// until the attribution is known.
func (p *Proxy) emitFlow(f *flow, e audit.Event) {
	if f == nil || f.attr == nil {
		p.cfg.Emitter.Emit(e)
		return
	}
	fa := f.attr
	fa.mu.Lock()
	if !fa.ready {
		fa.queue = append(fa.queue, ownEvent(e))
		fa.mu.Unlock()
		return
	}
	a := fa.a
	fa.mu.Unlock()
	a.Apply(&e)
	p.cfg.Emitter.Emit(e)
}

// flush emits the queued records with the answer (in order: new records
// wait on the lock until the queue is out).
func (fa *flowAttr) flush(em audit.Emitter, a audit.Attribution) {
	fa.mu.Lock()
	defer fa.mu.Unlock()
	fa.a, fa.ready = a, true
	for i := range fa.queue {
		a.Apply(&fa.queue[i])
		em.Emit(fa.queue[i])
	}
	fa.queue = nil
}

// awaitOwner holds a refusal until f's attribution is known (at most
// denyWait): the client may end as soon as it is refused.
func (p *Proxy) awaitOwner(f *flow) {
	if f != nil && f.attr != nil {
		f.attr.owner.Wait(denyWait)
	}
}

// ownEvent copies what a queued event points to that its producer may
// reuse (a request's HTTP payload lives in its reqEvent).
func ownEvent(e audit.Event) audit.Event {
	if e.HTTP != nil {
		h := *e.HTTP
		h.Injected = slices.Clone(h.Injected)
		if h.Package != nil {
			pk := *h.Package
			h.Package = &pk
		}
		e.HTTP = &h
	}
	if e.Flow != nil {
		fl := *e.Flow
		e.Flow = &fl
	}
	return e
}
