package dnsd

import (
	"net"
	"net/netip"
	"slices"

	"airlock/audit"
)

// Attributor finds the process in a sandbox behind a query: the serve
// wiring asks the sandbox's agent which process holds the socket (local is
// the sandbox's end, remote the address the query was sent to). Attribute
// must not block; the Owner it returns must be answered within a bound of
// the attributor's. A query's event waits for the answer; its answer to
// the client never does.
type Attributor interface {
	Attribute(sandboxID, proto string, local, remote netip.AddrPort) *audit.Owner
}

// attribute starts the lookup for a known sandbox's query.
func (s *Server) attribute(q *query) {
	if s.cfg.Attributor == nil || q.sb.ID == "" || q.w == nil {
		return
	}
	var local, remote netip.AddrPort
	proto := "tcp"
	if uw, ok := q.w.(*udpWriter); ok {
		proto, local = "udp", uw.src
		if ua, ok := uw.local.(*net.UDPAddr); ok && uw.dst.IsValid() {
			remote = netip.AddrPortFrom(uw.dst, uint16(ua.Port))
		}
	} else {
		if q.udp {
			proto = "udp"
		}
		if ra, la := q.w.RemoteAddr(), q.w.LocalAddr(); ra != nil && la != nil {
			local, _ = netip.ParseAddrPort(ra.String())
			remote, _ = netip.ParseAddrPort(la.String())
		}
	}
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	q.owner = s.cfg.Attributor.Attribute(q.sb.ID, proto, local, remote)
}

// emitQuery emits a query's event with its attribution: at once when the
// answer is known, else (a copy) when it comes.
func (s *Server) emitQuery(q *query, ev audit.Event) {
	if q.owner == nil {
		s.emit.Emit(ev)
		return
	}
	if a, ok := q.owner.Get(); ok {
		a.Apply(&ev)
		s.emit.Emit(ev)
		return
	}
	s.emitLater(q.owner, ownDNSEvent(ev))
}

// emitLater emits ev once o is answered (its own function: the closure
// must not move every query's event to the heap).
func (s *Server) emitLater(o *audit.Owner, ev audit.Event) {
	o.Then(func(a audit.Attribution) {
		a.Apply(&ev)
		s.emit.Emit(ev)
	})
}

// ownDNSEvent copies the payload a query's storage holds (a UDP packet's
// record and answers are reused by its next query).
func ownDNSEvent(ev audit.Event) audit.Event {
	if ev.DNS == nil {
		return ev
	}
	d := *ev.DNS
	d.Answers = slices.Clone(d.Answers)
	d.Chain = slices.Clone(d.Chain)
	d.Stripped = slices.Clone(d.Stripped)
	ev.DNS = &d
	return ev
}
