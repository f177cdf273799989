package proxy

import (
	"net"
	"net/netip"
	"sync"

	"airlock/internal/verdictlog"
	"airlock/policies"
)

// splicedConn is a live spliced tunnel Redecide can re-decide and close.
type splicedConn struct {
	f          *flow
	client, up net.Conn

	mu     sync.Mutex
	closed *policies.Verdict // the verdict that closed it, if Redecide did
}

// closeWith closes both ends and records the verdict that closed them:
// through the relay once it owns the sockets, through the net.Conns
// before.
func (s *splicedConn) closeWith(v policies.Verdict) {
	s.mu.Lock()
	if s.closed == nil {
		s.closed = &v
	}
	s.mu.Unlock()
	s.f.gate.Close()
	s.client.Close()
	s.up.Close()
}

func (s *splicedConn) closedBy() (policies.Verdict, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed == nil {
		return policies.Verdict{}, false
	}
	return *s.closed, true
}

func (p *Proxy) trackSplice(s *splicedConn) {
	p.mu.Lock()
	if p.spliced == nil {
		p.spliced = map[*splicedConn]struct{}{}
	}
	p.spliced[s] = struct{}{}
	p.mu.Unlock()
}

func (p *Proxy) untrackSplice(s *splicedConn) {
	p.mu.Lock()
	delete(p.spliced, s)
	p.mu.Unlock()
}

// Redecide re-runs the connection-stage decision of every open spliced
// tunnel under its sandbox's current policy (found again through the
// Identifier) and closes those the policy no longer allows, or whose
// category now inspects traffic. A closed tunnel's close record names the
// new rule and has the close reason "policy reload". Inspected tunnels
// need no call: each of their requests is decided when it arrives. Call
// it after every policy reload; it returns how many tunnels it closed.
func (p *Proxy) Redecide() int {
	p.mu.Lock()
	live := make([]*splicedConn, 0, len(p.spliced))
	for s := range p.spliced {
		live = append(live, s)
	}
	p.mu.Unlock()
	n := 0
	for _, s := range live {
		v, keep := p.redecide(s.f)
		if keep {
			continue
		}
		n++
		p.log.Info("proxy: tunnel closed by policy reload", "id", s.f.id, "sandbox", s.f.sb.ID,
			"host", s.f.host, "rule", v.Rule.String(), "reason", v.Reason)
		s.closeWith(v)
	}
	return n
}

// redecide decides an open spliced flow again. It never asks a human: a
// rule that now asks closes the tunnel (fail closed; a new connection is
// held for approval as usual).
func (p *Proxy) redecide(f *flow) (policies.Verdict, bool) {
	pol := f.sb.Policy
	if sb, ok := p.cfg.Identify.Identify(f.src.Addr()); ok && sb.Policy != nil && sb.ID == f.sb.ID {
		pol = sb.Policy
	} else if !f.byAuth {
		return internalDeny(ruleIdentity, "the sandbox is gone or its address changed"), false
	}
	req := policies.Request{Stage: policies.StageConnect, Host: f.host, SNI: f.sni, Port: f.port, Lock: f.sb.Lock}
	if a, err := netip.ParseAddr(f.host); err == nil {
		req.Host, req.IP = "", a
	}
	if f.host == "" {
		req.IP = f.origDst.Addr()
	}
	v := pol.Decide(req)
	if v.Action == policies.ActionAsk {
		v.Action = policies.ActionDeny
		v.Reason = verdictlog.JoinReason(v.Reason, "the rule now asks; reconnect to be asked")
		return v, false
	}
	if !v.Action.Allows() {
		return v, false
	}
	if v.Cat != nil && v.Cat.Inspect {
		v.Action = policies.ActionDeny
		v.Reason = verdictlog.JoinReason(v.Reason, "the category now inspects traffic; reconnect to be inspected")
		return v, false
	}
	if d, err := netip.ParseAddrPort(f.dialedAddr()); err == nil && !p.mayDial(d.Addr().Unmap(), v, pol) {
		return addrDeny(v, errRefusedAddr), false
	}
	return v, true
}
