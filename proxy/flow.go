package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"sync/atomic"
	"time"

	"airlock/audit"
	"airlock/policies"
	"airlock/proxy/internal/relay"
)

// Proxy-internal rule names: decisions the mechanism makes before or
// beside the policy. Every one of them is a denial logged with its name.
const (
	ruleIdentity  = "proxy.identity"   // unknown source address
	ruleLoop      = "proxy.loop"       // destination is the appliance's own listener
	ruleSniff     = "proxy.sniff"      // nothing recognizable within the sniff timeout
	ruleProtocol  = "proxy.protocol"   // malformed TLS or HTTP
	ruleFraming   = "proxy.framing"    // ambiguous HTTP framing (smuggling)
	ruleFronting  = "proxy.fronting"   // SNI, CONNECT authority, Host or URL disagree
	ruleTrace     = "proxy.trace"      // TRACE is refused
	ruleAddress   = "proxy.address"    // the name resolves only to refused addresses
	ruleResolve   = "proxy.resolve"    // the name does not resolve
	ruleSentinel  = "proxy.sentinel"   // a placeholder going to the wrong host
	ruleInject    = "proxy.inject"     // the secret to inject is unavailable
	ruleAsk       = "proxy.ask"        // a held request was not approved
	ruleBodyLimit = "proxy.body-limit" // request body over the category's limit
	ruleRate      = "proxy.rate"       // over the category's request rate
	ruleUpstream  = "proxy.upstream"   // upstream failure (certificate, connect)
	rulePath      = "proxy.path"       // a request path that cannot be normalized unambiguously
)

// flow is one client connection from accept to close.
type flow struct {
	id      string
	sb      Sandbox
	mode    string // explicit | transparent
	src     netip.AddrPort
	origDst netip.AddrPort // transparent only

	sni, host, alpn string
	port            uint16
	verdict         policies.Verdict
	dialed          atomic.Value // string
	handling        string       // inspect | splice | none
	mismatch        bool
	byAuth          bool             // identified by proxy credentials, not by address
	targets         []netip.AddrPort // checked upstream addresses

	up, down atomic.Int64
	start    time.Time
	decided  bool
	gate     relay.Gate // ends a spliced tunnel from outside
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (f *flow) dialedAddr() string {
	s, _ := f.dialed.Load().(string)
	return s
}

func (f *flow) flowPayload(stage string) *audit.Flow {
	fl := &audit.Flow{
		Stage: stage, Source: f.src.String(), SNI: f.sni, Host: f.host, ALPN: f.alpn,
		Mode: f.mode, Handling: f.handling, Mismatch: f.mismatch, Dialed: f.dialedAddr(),
	}
	if f.origDst.IsValid() {
		fl.OrigDst = f.origDst.String()
	}
	return fl
}

func verdictFields(e *audit.Event, v policies.Verdict) {
	e.Verdict = v.Action.String()
	e.Rule = v.Rule.String()
	e.Category = v.Category
	e.WouldDeny = v.WouldDeny
	e.Reason = v.Reason
}

// emitDecision writes the flow's decision record (once).
func (p *Proxy) emitDecision(f *flow) {
	if f.decided {
		return
	}
	f.decided = true
	e := audit.New(audit.KindFlow, f.sb.ID)
	e.ID = f.id
	verdictFields(&e, f.verdict)
	e.Flow = f.flowPayload("decision")
	p.cfg.Emitter.Emit(e)
	lvl := levelFor(f.verdict)
	p.log.Log(context.Background(), lvl, "proxy: flow", "id", f.id, "sandbox", f.sb.ID, "verdict", e.Verdict, "rule", e.Rule, "sni", f.sni, "host", f.host)
}

// emitClose writes the flow's close record.
func (p *Proxy) emitClose(f *flow, reason string) {
	if !f.decided {
		p.emitDecision(f)
	}
	e := audit.New(audit.KindFlow, f.sb.ID)
	e.ID = f.id
	verdictFields(&e, f.verdict)
	fl := f.flowPayload("close")
	fl.BytesUp, fl.BytesDown = f.up.Load(), f.down.Load()
	fl.DurationMS = time.Since(f.start).Milliseconds()
	fl.CloseReason = reason
	e.Flow = fl
	p.cfg.Emitter.Emit(e)
}

// internalDeny is a verdict the proxy itself makes.
func internalDeny(rule, reason string) policies.Verdict {
	return policies.Verdict{Action: policies.ActionDeny, Rule: policies.Rule{Name: rule}, Reason: reason}
}
