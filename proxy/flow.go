package proxy

import (
	"context"
	"net/netip"
	"sync/atomic"
	"time"

	"airlock/audit"
	"airlock/internal/randid"
	"airlock/internal/verdictlog"
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
	ruleInject    = "proxy.inject"     // the secret to inject is unavailable, or a protocol switch with one
	ruleAsk       = "proxy.ask"        // a held request was not approved
	ruleBodyLimit = "proxy.body-limit" // request body over the category's limit
	ruleRate      = "proxy.rate"       // over the category's request rate
	ruleUpstream  = "proxy.upstream"   // upstream failure (certificate, connect)
	rulePath      = "proxy.path"       // a request path that cannot be normalized unambiguously
)

// closeReason is why a flow ended: its close record's close_reason.
// docs/events.md lists exactly these values (TestCloseReasonsDocumented).
type closeReason string

const (
	reasonDone         closeReason = "done"                 // both sides finished normally
	reasonDenied       closeReason = "denied"               // refused at the flow decision
	reasonClientClosed closeReason = "client-closed"        // the client closed between requests
	reasonClientError  closeReason = "client-error"         // the client's bytes could not be read
	reasonIdle         closeReason = "idle-timeout"         // nothing moved for the idle timeout
	reasonReset        closeReason = "reset"                // a tunnel ended by an error or a reset
	reasonBadRequest   closeReason = "bad-request"          // a request that cannot be framed safely (400)
	reasonBodyUnread   closeReason = "body-unread"          // a request body left unread: no next request
	reasonWriteError   closeReason = "write-error"          // writing a response to the client failed
	reasonUpgraded     closeReason = "upgraded"             // handed over to a WebSocket relay
	reasonUpstream     closeReason = "upstream-error"       // the spliced tunnel's upstream could not be reached
	reasonHandshake    closeReason = "tls-handshake-failed" // the client's TLS handshake with the leaf failed
	reasonReload       closeReason = "policy reload"        // a policy reload refused the live tunnel
)

// flowMode is how a client reached the proxy: its records' flow.mode.
type flowMode string

const (
	modeExplicit    flowMode = "explicit"    // HTTP_PROXY or CONNECT
	modeTransparent flowMode = "transparent" // steered by the kernel path
)

// handling is what the proxy does with an allowed flow's bytes: its
// records' flow.handling.
type handling string

const (
	handleInspect handling = "inspect" // TLS terminated (or plain HTTP), every request decided
	handleSplice  handling = "splice"  // bytes copied after the decision
	handleNone    handling = "none"    // refused
)

// flow is one client connection from accept to close.
type flow struct {
	id      string
	sb      Sandbox
	mode    flowMode
	src     netip.AddrPort
	origDst netip.AddrPort // transparent only

	sni, host, alpn string
	port            uint16
	verdict         policies.Verdict
	dialed          atomic.Value // string
	handling        handling
	mismatch        bool
	byAuth          bool             // identified by proxy credentials, not by address
	targets         []netip.AddrPort // checked upstream addresses

	up, down atomic.Int64
	start    time.Time
	decided  bool
	gate     relay.Gate // ends a spliced tunnel from outside
	attr     *flowAttr  // nil: no attribution asked for
}

func newID() string { return randid.Hex(8) }

func (f *flow) dialedAddr() string {
	s, _ := f.dialed.Load().(string)
	return s
}

func (f *flow) flowPayload(stage string) *audit.Flow {
	fl := &audit.Flow{
		Stage: stage, Source: f.src.String(), SNI: f.sni, Host: f.host, ALPN: f.alpn,
		Mode: string(f.mode), Handling: string(f.handling), Mismatch: f.mismatch, Dialed: f.dialedAddr(),
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
	p.emitFlow(f, e)
	lvl := verdictlog.Level(f.verdict.Action, f.verdict.WouldDeny)
	p.log.Log(context.Background(), lvl, "proxy: flow", "id", f.id, "sandbox", f.sb.ID, "verdict", e.Verdict, "rule", e.Rule, "sni", f.sni, "host", f.host)
}

// emitClose writes the flow's close record.
func (p *Proxy) emitClose(f *flow, reason closeReason) {
	if !f.decided {
		p.emitDecision(f)
	}
	e := audit.New(audit.KindFlow, f.sb.ID)
	e.ID = f.id
	verdictFields(&e, f.verdict)
	fl := f.flowPayload("close")
	fl.BytesUp, fl.BytesDown = f.up.Load(), f.down.Load()
	fl.DurationMS = time.Since(f.start).Milliseconds()
	fl.CloseReason = string(reason)
	e.Flow = fl
	p.emitFlow(f, e)
}

// internalDeny is a verdict the proxy itself makes.
func internalDeny(rule, reason string) policies.Verdict {
	return policies.Verdict{Action: policies.ActionDeny, Rule: policies.Rule{Name: rule}, Reason: reason}
}
