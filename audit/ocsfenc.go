package audit

import (
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"airlock/internal/jsonstr"
)

// jobj writes the members of a JSON object: key adds the separator the
// member before it needs; str and int leave out empty values.
type jobj struct {
	b []byte
	n int
}

func (o *jobj) key(k string) {
	if o.n > 0 {
		o.b = append(o.b, ',')
	}
	o.n++
	o.b = append(append(append(o.b, '"'), k...), '"', ':')
}

func (o *jobj) str(k, v string) {
	if v != "" {
		o.key(k)
		o.b = jsonstr.Append(o.b, validUTF8(v))
	}
}

// joinValid joins parts by sep, each made valid UTF-8 first: bytes of
// two parts must not join into a character neither holds.
func joinValid(sep string, parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(validUTF8(p))
	}
	return b.String()
}

// validUTF8 replaces each invalid byte of s with U+FFFD, as the record's
// JSON has it: the OCSF fields derived from the record as read back are
// then the very bytes derived from the event (Verify re-derives them).
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return string(b)
}

func (o *jobj) int(k string, v int64) {
	if v != 0 {
		o.num(k, v)
	}
}

// num writes k even when v is 0.
func (o *jobj) num(k string, v int64) {
	o.key(k)
	o.b = strconv.AppendInt(o.b, v, 10)
}

// obj writes member k as an object filled by fill, or nothing when fill
// wrote no member.
func (o *jobj) obj(k string, fill func(*jobj)) {
	mark, n := len(o.b), o.n
	o.key(k)
	o.b, o.n = append(o.b, '{'), 0
	fill(o)
	if o.n == 0 {
		o.b, o.n = o.b[:mark], n
		return
	}
	o.b, o.n = append(o.b, '}'), n+1
}

// appendOCSFHead appends e as an OCSF event up to and including the last
// member of its metadata object, which it leaves open: ocsfLine adds the
// record's sequence number and the chained Airlock record.
func appendOCSFHead(b []byte, e *Event, productVersion string) []byte {
	h := classify(e)
	c := ocsfClasses[h.class]
	act := c.activities[h.activity]
	o := &jobj{b: append(b, '{')}
	o.num("class_uid", int64(h.class))
	o.str("class_name", c.name)
	o.num("category_uid", int64(c.category))
	o.str("category_name", c.catName)
	o.num("activity_id", int64(h.activity))
	o.str("activity_name", act)
	o.num("type_uid", int64(h.class*100+h.activity))
	o.str("type_name", c.name+": "+act) // both from the class table
	o.num("severity_id", int64(h.severity))
	o.str("severity", ocsfSeverityNames[h.severity])
	o.num("time", e.Time.UnixMilli())
	ocsfOutcomeFields(o, e)
	o.str("message", ocsfMessage(e))
	if e.Rule != "" || e.Category != "" {
		o.obj("firewall_rule", func(r *jobj) { r.str("name", e.Rule); r.str("category", e.Category) })
	}
	o.obj("device", func(d *jobj) {
		d.str("hostname", e.Node)
		d.str("name", e.Node)
		d.num("type_id", 9)
		d.str("type", "Firewall")
	})
	ocsfClassFields(o, e, h.class)
	o.key("metadata")
	m := o
	m.b, m.n = append(o.b, '{'), 0
	m.obj("product", func(p *jobj) {
		p.str("name", "Airlock")
		p.str("vendor_name", "Airlock")
		p.str("version", productVersion)
	})
	m.str("version", OCSFVersion)
	m.key("profiles")
	m.b = append(m.b, `["host","security_control"]`...)
	m.str("log_name", "airlock")
	m.str("correlation_uid", e.ID)
	return m.b
}

// ocsfMapping is the version of this mapping, written in every line
// (unmapped.ocsf_mapping): bump it with any change to what a line holds,
// so that Verify re-derives only the lines of the mapping it knows.
const ocsfMapping = 1

// ocsfLine is the stream line of a chained record raw whose OCSF head
// (appendOCSFHead) is head: the sequence number closes the metadata, and
// raw, byte for byte, is unmapped.airlock.
func ocsfLine(head []byte, seq uint64, raw []byte) []byte {
	out := make([]byte, 0, len(head)+len(raw)+64)
	out = append(out, head...)
	out = strconv.AppendUint(append(out, `,"sequence":`...), seq, 10)
	out = strconv.AppendInt(append(out, `},"unmapped":{"ocsf_mapping":`...), ocsfMapping, 10)
	out = append(out, `,"airlock":`...)
	out = append(out, raw...)
	return append(out, "}}"...)
}

func ocsfOutcomeFields(o *jobj, e *Event) {
	oc, ok := outcome(e)
	if !ok {
		return
	}
	o.num("action_id", int64(oc.action))
	o.str("action", oc.actionName)
	o.num("disposition_id", int64(oc.disposition))
	o.str("disposition", oc.dispName)
	o.num("status_id", int64(oc.status))
	o.str("status", statusNames[oc.status])
}

// ocsfMessage is the reason, else a short summary of what happened.
func ocsfMessage(e *Event) string {
	if e.Reason != "" {
		return e.Reason
	}
	var what string
	switch {
	case e.Lifecycle != nil:
		what = e.Lifecycle.Stage
	case e.Policy != nil:
		what = joinValid(" ", e.Policy.Action, e.Policy.Name)
	case e.Approval != nil:
		what = joinValid(" ", e.Approval.Stage, e.Approval.Destination)
	case e.Lockdown != nil:
		what = joinValid(" ", e.Lockdown.Action, e.Lockdown.Scope)
	case e.Exec != nil:
		what = e.Exec.Stage
	case e.Flow != nil:
		what = joinValid(" ", e.Flow.Stage, e.Flow.CloseReason)
	case e.DNS != nil:
		what = joinValid(" ", e.DNS.QType, e.DNS.QName, e.DNS.RCode)
	case e.HTTP != nil:
		what = joinValid(" ", e.HTTP.Method, urlString(e.HTTP))
	case e.Drop != nil:
		what = joinValid(" to ", e.Drop.Protocol, e.Drop.Dest)
	}
	return strings.TrimSpace(joinValid(" ", string(e.Kind), what))
}

func ocsfClassFields(o *jobj, e *Event, class int) {
	switch class {
	case ocsfNetwork:
		if e.Flow != nil {
			ocsfFlow(o, e)
		} else {
			ocsfDrop(o, e)
		}
	case ocsfHTTP:
		ocsfHTTPFields(o, e)
	case ocsfDNS:
		ocsfDNSFields(o, e)
	case ocsfProcess:
		ocsfExec(o, e)
	case ocsfAPI:
		ocsfRefusal(o, e)
	}
}

// endpoint writes an address:port (or a bare address) as ip and port, a
// sandbox as uid, a name as hostname.
func endpoint(o *jobj, key, addr, sandbox, hostname string) {
	o.obj(key, func(p *jobj) {
		if ap, err := netip.ParseAddrPort(addr); err == nil {
			p.str("ip", ap.Addr().Unmap().String())
			p.int("port", int64(ap.Port()))
		} else if a, err := netip.ParseAddr(addr); err == nil {
			p.str("ip", a.String())
		} else if addr != "" && hostname == "" {
			hostname = addr
		}
		p.str("hostname", hostname)
		p.str("uid", sandbox)
	})
}

func actorProcess(o *jobj, e *Event) {
	o.obj("actor", func(a *jobj) {
		a.obj("process", func(p *jobj) { p.int("pid", int64(e.Pid)); p.str("name", e.Comm) })
	})
}

func outbound(o *jobj, proto, uid string) {
	o.obj("connection_info", func(c *jobj) {
		c.str("protocol_name", proto)
		c.num("direction_id", 2)
		c.str("direction", "Outbound")
		c.str("uid", uid)
	})
}

func traffic(o *jobj, up, down, packets int64) {
	o.obj("traffic", func(t *jobj) {
		t.int("bytes_out", up)
		t.int("bytes_in", down)
		t.int("bytes", up+down)
		t.int("packets", packets)
	})
}

func ocsfFlow(o *jobj, e *Event) {
	f := e.Flow
	actorProcess(o, e)
	endpoint(o, "src_endpoint", f.Source, e.Sandbox, "")
	endpoint(o, "dst_endpoint", firstNonEmpty(f.Dialed, f.OrigDst), "", firstNonEmpty(f.Host, f.SNI))
	outbound(o, "tcp", e.ID)
	traffic(o, f.BytesUp, f.BytesDown, 0)
	o.int("duration", f.DurationMS)
}

func ocsfDrop(o *jobj, e *Event) {
	d := e.Drop
	o.obj("src_endpoint", func(p *jobj) { p.str("ip", d.Source); p.str("mac", d.MAC); p.str("uid", e.Sandbox) })
	o.obj("dst_endpoint", func(p *jobj) { p.str("ip", d.Dest); p.int("port", int64(d.Port)) })
	outbound(o, d.Protocol, "")
	traffic(o, 0, 0, int64(d.Count))
	o.int("count", int64(d.Count))
}

func ocsfHTTPFields(o *jobj, e *Event) {
	r := e.HTTP
	host, port := splitHostPort(r.Host)
	actorProcess(o, e)
	o.obj("src_endpoint", func(p *jobj) { p.str("uid", e.Sandbox) })
	o.obj("dst_endpoint", func(p *jobj) { p.str("hostname", host); p.int("port", port) })
	o.obj("http_request", func(q *jobj) {
		q.str("http_method", r.Method)
		q.obj("url", func(u *jobj) {
			u.str("scheme", r.Scheme)
			u.str("hostname", host)
			u.int("port", port)
			u.str("path", r.Path)
			u.str("query_string", r.Query)
			u.str("url_string", urlString(r))
		})
	})
	o.obj("http_response", func(s *jobj) { s.int("code", int64(r.Status)) })
	traffic(o, r.BytesUp, r.BytesDown, 0)
	o.int("duration", r.DurationMS)
}

func urlString(r *HTTP) string {
	if r.Host == "" {
		return ""
	}
	u := joinValid("", r.Scheme, "://", r.Host, r.Path)
	if r.Query != "" {
		u = joinValid("?", u, r.Query)
	}
	return u
}

// splitHostPort splits host:port; a host without a port has port 0.
func splitHostPort(s string) (string, int64) {
	h := hostOnly(s)
	if h == s {
		return s, 0
	}
	i := strings.LastIndexByte(s, ':')
	p, _ := strconv.ParseInt(s[i+1:], 10, 32)
	return h, p
}

var rcodeIDs = map[string]int64{"NOERROR": 0, "FORMERR": 1, "SERVFAIL": 2, "NXDOMAIN": 3, "NOTIMP": 4, "REFUSED": 5,
	"YXDOMAIN": 6, "YXRRSET": 7, "NXRRSET": 8, "NOTAUTH": 9, "NOTZONE": 10}

func ocsfDNSFields(o *jobj, e *Event) {
	d := e.DNS
	actorProcess(o, e)
	endpoint(o, "src_endpoint", d.Client, e.Sandbox, "")
	endpoint(o, "dst_endpoint", d.Server, "", "")
	o.obj("query", func(q *jobj) { q.str("hostname", d.QName); q.str("type", d.QType); q.str("class", "IN") })
	if len(d.Answers) > 0 {
		o.key("answers")
		o.b = append(o.b, '[')
		for i, a := range d.Answers {
			if i > 0 {
				o.b = append(o.b, ',')
			}
			o.b = jsonstr.Append(append(o.b, `{"rdata":`...), validUTF8(a))
			o.b = append(o.b, '}')
		}
		o.b = append(o.b, ']')
	}
	if id, ok := rcodeIDs[strings.ToUpper(d.RCode)]; ok {
		o.num("rcode_id", id)
	} else if d.RCode != "" {
		o.num("rcode_id", 99)
	}
	o.str("rcode", d.RCode)
}

func ocsfExec(o *jobj, e *Event) {
	x := e.Exec
	o.obj("actor", func(a *jobj) {
		a.str("app_name", "airlock")
		if x.Principal != "" {
			a.obj("user", func(u *jobj) { u.str("name", x.Principal) })
		}
	})
	o.obj("process", func(p *jobj) {
		p.int("pid", int64(x.Pid))
		p.str("cmd_line", joinValid(" ", x.Argv...))
		p.str("uid", e.ID)
		p.obj("user", func(u *jobj) { u.str("name", x.User) })
		p.obj("container", func(c *jobj) { c.str("uid", e.Sandbox) })
	})
	if x.ExitCode != nil {
		o.num("exit_code", int64(*x.ExitCode))
	}
	o.int("duration", x.DurationMS)
}

func ocsfRefusal(o *jobj, e *Event) {
	r := e.Refusal
	method, path, _ := strings.Cut(r.Action, " ")
	o.obj("actor", func(a *jobj) { a.obj("user", func(u *jobj) { u.str("name", r.Principal) }) })
	endpoint(o, "src_endpoint", r.Peer, "", "")
	o.obj("api", func(a *jobj) {
		a.str("operation", r.Action)
		a.obj("request", func(q *jobj) { q.str("uid", r.RequestID) })
		a.obj("response", func(s *jobj) { s.int("code", int64(r.Status)); s.str("error", r.Code) })
	})
	o.obj("http_request", func(q *jobj) {
		q.str("http_method", method)
		q.obj("url", func(u *jobj) { u.str("path", path) })
	})
	o.obj("http_response", func(s *jobj) { s.int("code", int64(r.Status)) })
}
