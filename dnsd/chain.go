package dnsd

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"airlock/audit"
	"airlock/internal/verdictlog"
	"airlock/policies"
)

// query is one request travelling down the chain: what it asks, where the
// chain stands, and what the steps found.
type query struct {
	ctx   context.Context
	start time.Time
	w     dns.ResponseWriter
	req   *dns.Msg
	src   netip.Addr
	step  int // the chain step it stands at

	sb         Sandbox
	known      bool
	name       string // lower-case, fully qualified
	lname      string // the name in lower case when the reader parsed it already
	qtype      uint16
	verdict    policies.Verdict
	guard      string    // the exfiltration guard that tripped, "" if none
	guardScope string    // the parent names_per_parent counted under, when it tripped
	redacted   redaction // what events and logs keep of a guard-refused name

	resp *dns.Msg // the answer to write, nil until a step sets it
	// respOwned: resp is an upstream answer no other query shares.
	respOwned bool
	ckey      cacheKey
	cacheHit  bool
	upstream  string
	strip     stripInfo // what the answer filter removed
	reason    string    // why the query was refused outside the policy (malformed, unknown source)
	rule      string    // the rule of that refusal (RuleMalformed, ...)
	local     net.Addr  // the server address when there is no writer (unparsed TCP messages)
	err       error
	udp       bool

	// A fast cache hit: wire is the packed answer to write; resp and
	// answers are the shared entry's and must not be changed.
	wire    *[]byte
	hit     *entry
	answers []string

	// The exchange upstream, when a UDP reader began it (sendMiss): call
	// is the exchange, at where its walk over the upstreams stands, and
	// got says the upstream socket's reader resumed the query with the
	// first attempt's answer (in call.res).
	call *call
	at   attempts
	got  bool

	// owner is the lookup of the process behind the query (Attributor).
	owner *audit.Owner

	// pkt is the UDP reader's packet carrying the query, nil on other
	// paths: its storage holds the event record and an error answer, so
	// that the reader's queries allocate neither.
	pkt *packet
}

// outcome is what a step tells the chain.
type outcome uint8

const (
	next   outcome = iota // go on with the next step
	answer                // stop: q.resp (or q.wire) is the answer
	wait                  // the query waits; resume carries on at this step
)

// step is one link of the handler chain.
type step struct {
	name string
	run  func(s *Server, q *query) outcome
}

// chain is the ordered handler list. Every query ends in writeAndLog.
// Only forward waits (on a UDP reader, which must not block; see
// sendMiss). It is set in init: its steps resume it.
var chain []step

func init() {
	chain = []step{
		{"identify", (*Server).identify},
		{"policy", (*Server).decide},
		{"guards", (*Server).guardStep},
		{"cache", (*Server).cacheLookup},
		{"forward", (*Server).forward},
		{"filter", (*Server).filterStep},
	}
}

// ServeDNS implements dns.Handler.
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	s.resume(s.newQuery(w, req))
}

func (s *Server) newQuery(w dns.ResponseWriter, req *dns.Msg) *query {
	return s.initQuery(new(query), w, req)
}

// initQuery readies q (possibly reused storage) for req.
func (s *Server) initQuery(q *query, w dns.ResponseWriter, req *dns.Msg) *query {
	*q = query{ctx: s.ctx, start: time.Now(), w: w, req: req}
	if uw, ok := w.(*udpWriter); ok {
		q.udp, q.src = true, uw.src.Addr()
	} else {
		ra := w.RemoteAddr()
		_, q.udp = ra.(*net.UDPAddr)
		q.src = addrOf(ra)
	}
	return q
}

// resume runs q's chain from the step it stands at, the first for a new
// query, and writes and logs its answer. It returns false when a step
// made the query wait: whoever it waits on calls resume again.
func (s *Server) resume(q *query) bool {
	for ; q.step < len(chain); q.step++ {
		switch chain[q.step].run(s, q) {
		case answer:
			s.writeAndLog(q)
			return true
		case wait:
			return false
		}
	}
	s.writeAndLog(q)
	return true
}

func addrOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.UDPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	if a == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// identify finds the sandbox and checks the message shape.
func (s *Server) identify(q *query) outcome {
	if len(q.req.Question) > 0 {
		q.name = q.lname
		if q.name == "" {
			q.name = strings.ToLower(dns.Fqdn(q.req.Question[0].Name))
		}
		q.qtype = q.req.Question[0].Qtype
	}
	sb, ok := s.cfg.Identifier.Identify(q.src)
	if !ok || sb.Policy == nil {
		q.rule, q.reason = RuleUnknownSource, "unknown source"
		q.resp = q.refuse(dns.RcodeRefused, dns.ExtendedErrorCodeProhibited, "unknown source")
		return answer
	}
	q.sb, q.known = sb, true
	s.attribute(q)
	if q.req.Response || q.req.Opcode != dns.OpcodeQuery {
		q.rule, q.reason = RuleMalformed, "not a query"
		q.resp = q.refuse(dns.RcodeNotImplemented, 0, "")
		return answer
	}
	if len(q.req.Question) != 1 {
		q.rule, q.reason = RuleMalformed, "question count"
		q.resp = q.refuse(dns.RcodeFormatError, 0, "")
		return answer
	}
	if q.req.Question[0].Qclass != dns.ClassINET {
		q.rule, q.reason = RuleQClass, "class "+dns.Class(q.req.Question[0].Qclass).String()
		q.resp = q.refuse(dns.RcodeRefused, dns.ExtendedErrorCodeNotSupported, "only class IN")
		return answer
	}
	if _, ok := dns.IsDomainName(q.name); !ok || strings.Contains(q.name, "..") {
		q.rule, q.reason = RuleMalformed, "malformed name"
		q.resp = q.refuse(dns.RcodeFormatError, 0, "")
		return answer
	}
	return next
}

// refusal builds an error answer with an optional RFC 8914 Extended DNS
// Error (only when the client speaks EDNS).
func refusal(req *dns.Msg, rcode int, ede uint16, text string) *dns.Msg {
	return new(answerScratch).refusal(req, rcode, ede, text)
}

// answerScratch is storage for an error answer, reused by the UDP reader
// for every query a pooled packet carries.
type answerScratch struct {
	msg   dns.Msg
	q     [1]dns.Question
	opt   dns.OPT
	ede   dns.EDNS0_EDE
	opts  [1]dns.EDNS0
	extra [1]dns.RR
}

// refusal fills the scratch answer (see the function refusal) and returns it.
func (a *answerScratch) refusal(req *dns.Msg, rcode int, ede uint16, text string) *dns.Msg {
	m := &a.msg
	*m = dns.Msg{}
	m.Id, m.Response, m.Opcode, m.Rcode, m.RecursionAvailable = req.Id, true, req.Opcode, rcode, true
	if m.Opcode == dns.OpcodeQuery {
		m.RecursionDesired, m.CheckingDisabled = req.RecursionDesired, req.CheckingDisabled
	}
	if len(req.Question) > 0 {
		a.q[0] = req.Question[0]
		m.Question = a.q[:]
	}
	if o := req.IsEdns0(); o != nil {
		a.opt = dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT, Class: dns.DefaultMsgSize}}
		if ede != 0 || text != "" {
			a.ede = dns.EDNS0_EDE{InfoCode: ede, ExtraText: text}
			a.opts[0] = &a.ede
			a.opt.Option = a.opts[:]
		}
		a.extra[0] = &a.opt
		m.Extra = a.extra[:]
	}
	return m
}

// refuse is refusal, in the packet's scratch answer on the UDP reader.
func (q *query) refuse(rcode int, ede uint16, text string) *dns.Msg {
	if q.pkt == nil {
		return refusal(q.req, rcode, ede, text)
	}
	return q.pkt.scratch.refusal(q.req, rcode, ede, text)
}

// servfail answers an upstream failure.
func servfail(req *dns.Msg) *dns.Msg {
	return refusal(req, dns.RcodeServerFailure, dns.ExtendedErrorCodeNetworkError, "upstream failed")
}

// writeAndLog writes the answer and emits the query's event.
func (s *Server) writeAndLog(q *query) {
	if q.wire != nil {
		s.logQuery(q)
		if _, err := q.w.Write(*q.wire); err != nil {
			s.log.Debug("dns write", logClient, q.src.String(), logErr, err)
		}
		bufPool.Put(q.wire)
		return
	}
	if q.resp == nil {
		q.resp = servfail(q.req)
	}
	q.resp.Id = q.req.Id
	if q.udp {
		q.resp.Truncate(udpSize(q.req))
	}
	s.logQuery(q) // before the write: once a client has its answer, the event exists
	if err := q.w.WriteMsg(q.resp); err != nil {
		// An upstream answer that cannot be packed again (hostile or broken
		// records) must not leave the client without an answer.
		s.log.Warn("dns write failed, answering SERVFAIL", logClient, q.src.String(), logQName, q.logName(), logErr, err)
		if err := q.w.WriteMsg(servfail(q.req)); err != nil {
			s.log.Debug("dns write", logClient, q.src.String(), logErr, err)
		}
	}
}

func udpSize(req *dns.Msg) int {
	if o := req.IsEdns0(); o != nil {
		if sz := int(o.UDPSize()); sz > dns.MinMsgSize {
			return min(sz, 4096)
		}
	}
	return dns.MinMsgSize
}

var _ dns.Handler = (*Server)(nil)

// event builds the audit record for q.
func (s *Server) event(q *query) audit.Event {
	now := time.Now()
	ev := audit.Event{Schema: audit.SchemaVersion, Time: now.UTC(), Kind: audit.KindDNS, Sandbox: q.sb.ID}
	v := q.verdict
	switch {
	case q.reason != "":
		ev.Verdict, ev.Rule, ev.Reason = policies.ActionDeny.String(), q.rule, q.reason
	case q.guard != "" && resolves(v.Action):
		ev.Verdict, ev.Rule, ev.Reason = policies.ActionDeny.String(), "dns."+q.guard, "exfiltration guard: "+q.guard
		if q.guardScope != "" {
			ev.Reason += ": too many distinct names under " + q.guardScope + " this minute"
		}
		ev.Category = v.Category
	default:
		ev.Verdict, ev.Rule, ev.Category, ev.WouldDeny, ev.Reason = v.Action.String(), s.rules.get(v.Rule, policies.Rule.String), v.Category, v.WouldDeny, v.Reason
		ev.Reason = verdictlog.JoinReason(ev.Reason, q.strip.reason)
	}
	var d *audit.DNS
	if q.pkt != nil {
		d = &q.pkt.rec // emitters must not retain events
	} else {
		d = new(audit.DNS)
	}
	*d = audit.DNS{
		QName:     q.name,
		QType:     dns.Type(q.qtype).String(),
		RCode:     dns.RcodeToString[q.rcode()],
		Chain:     q.strip.chain,
		Stripped:  q.strip.addrs,
		Upstream:  q.upstream,
		LatencyUS: now.Sub(q.start).Microseconds(),
		CacheHit:  q.cacheHit,
		Guard:     q.guard,
		Client:    s.clients.get(q.src, netip.Addr.String),
	}
	if uw, ok := q.w.(*udpWriter); ok && uw.dst.IsValid() {
		d.Server = s.servers4.get(netip.AddrPortFrom(uw.dst, uint16(uw.local.(*net.UDPAddr).Port)), netip.AddrPort.String)
	} else if q.w != nil && q.w.LocalAddr() != nil {
		d.Server = s.serverString(q.w.LocalAddr())
	} else if q.local != nil {
		d.Server = q.local.String()
	}
	if q.guard != "" {
		r := q.redactedName()
		d.QName, d.QNameTruncated, d.QNameSHA256 = r.name, r.cut, r.sum
	}
	if d.Guard == "" {
		d.Guard = q.strip.guard // the answer filter's guards; the verdict stays the name's
	}
	d.Answers = q.answers
	if q.hit == nil {
		for _, rr := range q.resp.Answer {
			d.Answers = append(d.Answers, rrValue(rr))
		}
	}
	ev.DNS = d
	return ev
}

// logName is the name as logs may keep it: cut short when a guard refused it.
func (q *query) logName() string {
	if q.guard == "" {
		return q.name
	}
	return q.redactedName().name
}

// redaction is a guard-refused name as events and logs keep it
// (redactName), made once per query.
type redaction struct {
	name, sum string
	cut, done bool
}

// redactedName redacts q's name the first time it is asked for.
func (q *query) redactedName() redaction {
	if !q.redacted.done {
		n, cut, sum := redactName(q.name, q.guardScope)
		q.redacted = redaction{name: n, sum: sum, cut: cut, done: true}
	}
	return q.redacted
}

// rcode is the rcode of the answer q gets.
func (q *query) rcode() int {
	if q.hit != nil {
		return q.hit.rcode
	}
	return q.resp.Rcode
}

// serverString formats a listener's address, memoised for the pointer
// types of package net (comparable, one per socket or connection).
func (s *Server) serverString(a net.Addr) string {
	switch a.(type) {
	case *net.UDPAddr, *net.TCPAddr:
		return s.serverAny.get(a, net.Addr.String)
	}
	return a.String()
}

// rrValue is the data part of a record, as it appears in zone files.
func rrValue(rr dns.RR) string {
	switch rr := rr.(type) {
	case *dns.A:
		return rr.A.String()
	case *dns.AAAA:
		return rr.AAAA.String()
	case *dns.CNAME:
		return "CNAME " + rr.Target
	}
	h := rr.Header().String()
	return dns.Type(rr.Header().Rrtype).String() + " " + strings.TrimSpace(strings.TrimPrefix(rr.String(), h))
}

// logQuery emits the event and a log line whose level follows the verdict.
func (s *Server) logQuery(q *query) {
	if q.reason != "" {
		ok, suppressed := s.noise.allow(q.src, q.start)
		if !ok {
			return
		}
		if suppressed > 0 {
			q.reason += fmt.Sprintf(" (%d earlier refused queries from this source not logged: rate limit)", suppressed)
		}
	}
	ev := s.event(q)
	s.emitQuery(q, ev)
	lvl := verdictlog.LevelOf(ev.Verdict, ev.WouldDeny)
	if q.err != nil {
		lvl = slog.LevelWarn
	}
	if !s.log.Enabled(q.ctx, lvl) {
		return
	}
	s.log.Log(q.ctx, lvl, "dns query",
		logSandbox, ev.Sandbox, logClient, ev.DNS.Client, logQName, ev.DNS.QName, logQType, ev.DNS.QType,
		logRCode, ev.DNS.RCode, logVerdict, ev.Verdict, logRule, ev.Rule, logCategory, ev.Category,
		logGuard, ev.DNS.Guard, logUpstream, ev.DNS.Upstream, logCacheHit, ev.DNS.CacheHit,
		logLatency, ev.DNS.LatencyUS, logStripped, ev.DNS.Stripped, logErr, q.err)
}
