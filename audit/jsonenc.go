package audit

import (
	"strconv"
	"time"

	"airlock/internal/jsonstr"
)

// AppendJSON appends e as json.Marshal writes it (appendEvent), for a
// producer that keeps its own copy of some events (a sandbox's
// commands.jsonl).
func AppendJSON(b []byte, e *Event) ([]byte, error) { return appendEvent(b, e) }

// appendEvent appends e as encoding/json encodes it (HTML-safe escaping,
// omitempty as tagged, times in RFC 3339 with nanoseconds), without
// reflection: the pipeline encodes every record once, and this is most of
// what producers pay per Emit. TestAppendEventMatchesEncodingJSON checks
// it against encoding/json for every kind with every field set and unset;
// a field added to the schema without a line here fails that test.
func appendEvent(b []byte, e *Event) ([]byte, error) {
	b = append(b, `{"schema":`...)
	b = strconv.AppendInt(b, int64(e.Schema), 10)
	b, err := appendTime(append(b, `,"time":`...), e.Time)
	if err != nil {
		return nil, err
	}
	b = jsonstr.Append(append(b, `,"kind":`...), string(e.Kind))
	b = optString(b, `,"node":`, e.Node)
	b = optString(b, `,"sandbox":`, e.Sandbox)
	b = optString(b, `,"id":`, e.ID)
	b = optString(b, `,"verdict":`, e.Verdict)
	b = optString(b, `,"rule":`, e.Rule)
	b = optString(b, `,"category":`, e.Category)
	b = appendBool(append(b, `,"would_deny":`...), e.WouldDeny)
	b = optString(b, `,"reason":`, e.Reason)
	b = optString(b, `,"exec_id":`, e.ExecID)
	b = optInt(b, `,"pid":`, int64(e.Pid))
	b = optString(b, `,"comm":`, e.Comm)
	b = optString(b, `,"attribution":`, e.Attribution)
	if e.DNS != nil {
		b = appendDNS(append(b, `,"dns":`...), e.DNS)
	}
	if e.Flow != nil {
		b = appendFlow(append(b, `,"flow":`...), e.Flow)
	}
	if e.HTTP != nil {
		b = appendHTTP(append(b, `,"http":`...), e.HTTP)
	}
	if e.Drop != nil {
		b = appendDrop(append(b, `,"drop":`...), e.Drop)
	}
	if e.Exec != nil {
		b = appendExec(append(b, `,"exec":`...), e.Exec)
	}
	if e.Lifecycle != nil {
		b = appendLifecycle(append(b, `,"lifecycle":`...), e.Lifecycle)
	}
	if e.Policy != nil {
		b = appendPolicy(append(b, `,"policy":`...), e.Policy)
	}
	if e.Approval != nil {
		b = appendApproval(append(b, `,"approval":`...), e.Approval)
	}
	if e.Gap != nil {
		if b, err = appendGap(append(b, `,"gap":`...), e.Gap); err != nil {
			return nil, err
		}
	}
	if e.SecretReflected != nil {
		b = appendSecretReflected(append(b, `,"secret_reflected":`...), e.SecretReflected)
	}
	if e.Lockdown != nil {
		b = appendLockdown(append(b, `,"lockdown":`...), e.Lockdown)
	}
	if e.Refusal != nil {
		b = appendRefusal(append(b, `,"refusal":`...), e.Refusal)
	}
	b = appendIngressKinds(b, e)
	b = appendAuditError(b, e.AuditError)
	b = optUint(b, `,"seq":`, e.Seq)
	b = optString(b, `,"prev_hash":`, e.PrevHash)
	return append(b, '}'), nil
}

func appendDNS(b []byte, d *DNS) []byte {
	b = jsonstr.Append(append(b, `{"qname":`...), d.QName)
	if d.QNameTruncated {
		b = append(b, `,"qname_truncated":true`...)
	}
	b = optString(b, `,"qname_sha256":`, d.QNameSHA256)
	b = jsonstr.Append(append(b, `,"qtype":`...), d.QType)
	b = jsonstr.Append(append(b, `,"rcode":`...), d.RCode)
	b = optStrings(b, `,"answers":`, d.Answers)
	b = appendHops(b, d.Chain)
	b = optStrings(b, `,"stripped":`, d.Stripped)
	b = optString(b, `,"upstream":`, d.Upstream)
	b = strconv.AppendInt(append(b, `,"latency_us":`...), d.LatencyUS, 10)
	b = appendBool(append(b, `,"cache_hit":`...), d.CacheHit)
	b = optString(b, `,"guard":`, d.Guard)
	b = optString(b, `,"client":`, d.Client)
	b = optString(b, `,"server":`, d.Server)
	return append(b, '}')
}

func appendHops(b []byte, hops []DNSHop) []byte {
	if len(hops) == 0 {
		return b
	}
	b = append(b, `,"chain":[`...)
	for i, h := range hops {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonstr.Append(append(b, `{"name":`...), h.Name)
		b = jsonstr.Append(append(b, `,"verdict":`...), h.Verdict)
		b = jsonstr.Append(append(b, `,"rule":`...), h.Rule)
		if h.WouldDeny {
			b = append(b, `,"would_deny":true`...)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

func appendFlow(b []byte, f *Flow) []byte {
	b = jsonstr.Append(append(b, `{"stage":`...), f.Stage)
	b = jsonstr.Append(append(b, `,"source":`...), f.Source)
	b = optString(b, `,"orig_dst":`, f.OrigDst)
	b = optString(b, `,"dialed":`, f.Dialed)
	b = optString(b, `,"sni":`, f.SNI)
	b = optString(b, `,"host":`, f.Host)
	b = optString(b, `,"alpn":`, f.ALPN)
	b = optString(b, `,"mode":`, f.Mode)
	b = optString(b, `,"handling":`, f.Handling)
	if f.Mismatch {
		b = append(b, `,"mismatch":true`...)
	}
	b = optInt(b, `,"bytes_up":`, f.BytesUp)
	b = optInt(b, `,"bytes_down":`, f.BytesDown)
	b = optInt(b, `,"duration_ms":`, f.DurationMS)
	b = optString(b, `,"close_reason":`, f.CloseReason)
	return append(b, '}')
}

func appendHTTP(b []byte, h *HTTP) []byte {
	b = jsonstr.Append(append(b, `{"method":`...), h.Method)
	b = jsonstr.Append(append(b, `,"scheme":`...), h.Scheme)
	b = jsonstr.Append(append(b, `,"host":`...), h.Host)
	b = jsonstr.Append(append(b, `,"path":`...), h.Path)
	b = optString(b, `,"query":`, h.Query)
	b = optInt(b, `,"status":`, int64(h.Status))
	b = optInt(b, `,"bytes_up":`, h.BytesUp)
	b = optInt(b, `,"bytes_down":`, h.BytesDown)
	b = optInt(b, `,"duration_ms":`, h.DurationMS)
	b = optString(b, `,"flow_id":`, h.FlowID)
	b = optStrings(b, `,"injected":`, h.Injected)
	b = optString(b, `,"secret":`, h.Secret)
	if p := h.Package; p != nil {
		b = jsonstr.Append(append(b, `,"package":{"ecosystem":`...), p.Ecosystem)
		b = jsonstr.Append(append(b, `,"name":`...), p.Name)
		b = optString(b, `,"version":`, p.Version)
		b = appendPackageGate(b, p)
		b = append(b, '}')
	}
	b = optString(b, `,"upgrade":`, h.Upgrade)
	return append(b, '}')
}

func appendPackageGate(b []byte, p *Package) []byte {
	b = optString(b, `,"published":`, p.Published)
	b = optString(b, `,"integrity":`, p.Integrity)
	if len(p.Gated) > 0 {
		b = append(b, `,"gated":[`...)
		for i, g := range p.Gated {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonstr.Append(append(b, `{"version":`...), g.Version)
			b = jsonstr.Append(append(b, `,"reason":`...), g.Reason)
			b = jsonstr.Append(append(b, `,"rule":`...), g.Rule)
			b = optString(b, `,"published":`, g.Published)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = optInt(b, `,"gated_total":`, int64(p.GatedTotal))
	b = optString(b, `,"warning":`, p.Warning)
	return optString(b, `,"cache":`, p.Cache)
}

func appendDrop(b []byte, d *Drop) []byte {
	b = jsonstr.Append(append(b, `{"protocol":`...), d.Protocol)
	b = jsonstr.Append(append(b, `,"source":`...), d.Source)
	b = jsonstr.Append(append(b, `,"dest":`...), d.Dest)
	b = optUint(b, `,"port":`, uint64(d.Port))
	b = optString(b, `,"mac":`, d.MAC)
	b = strconv.AppendUint(append(b, `,"count":`...), d.Count, 10)
	return append(b, '}')
}

func appendExec(b []byte, x *Exec) []byte {
	b = jsonstr.Append(append(b, `{"stage":`...), x.Stage)
	b = appendStrings(append(b, `,"argv":`...), x.Argv)
	b = optString(b, `,"cwd":`, x.Cwd)
	if x.ExitCode != nil {
		b = strconv.AppendInt(append(b, `,"exit_code":`...), int64(*x.ExitCode), 10)
	}
	b = optInt(b, `,"duration_ms":`, x.DurationMS)
	if x.TimedOut {
		b = append(b, `,"timed_out":true`...)
	}
	if x.Killed {
		b = append(b, `,"killed":true`...)
	}
	b = optString(b, `,"limit":`, x.Limit)
	b = optString(b, `,"agent":`, x.Agent)
	b = optString(b, `,"user":`, x.User)
	b = optInt(b, `,"pid":`, int64(x.Pid))
	if x.Background {
		b = append(b, `,"background":true`...)
	}
	if x.TTY {
		b = append(b, `,"tty":true`...)
	}
	b = optString(b, `,"signal":`, x.Signal)
	b = optInt(b, `,"reaped":`, int64(x.Reaped))
	b = optInt(b, `,"utime_us":`, x.UtimeUS)
	b = optInt(b, `,"stime_us":`, x.StimeUS)
	b = optInt(b, `,"maxrss_kb":`, x.MaxRSSKB)
	b = optInt(b, `,"stdout_bytes":`, x.StdoutBytes)
	b = optInt(b, `,"stderr_bytes":`, x.StderrBytes)
	b = optString(b, `,"stdout_head":`, x.StdoutHead)
	b = optString(b, `,"stdout_tail":`, x.StdoutTail)
	b = optString(b, `,"stderr_head":`, x.StderrHead)
	b = optString(b, `,"stderr_tail":`, x.StderrTail)
	b = optInt(b, `,"redactions":`, int64(x.Redactions))
	if x.Recovered {
		b = append(b, `,"recovered":true`...)
	}
	b = optString(b, `,"record":`, x.Record)
	b = optString(b, `,"principal":`, x.Principal)
	return append(b, '}')
}

func appendLifecycle(b []byte, l *Lifecycle) []byte {
	b = jsonstr.Append(append(b, `{"stage":`...), l.Stage)
	b = optString(b, `,"state":`, string(l.State))
	b = optString(b, `,"principal":`, l.Principal)
	b = optString(b, `,"image":`, l.Image)
	b = optString(b, `,"policy":`, l.Policy)
	b = optString(b, `,"policy_hash":`, l.PolicyHash)
	b = optString(b, `,"address":`, l.Address)
	b = optString(b, `,"image_id":`, l.ImageID)
	b = optString(b, `,"template":`, l.Template)
	if l.ExitCode != nil {
		b = strconv.AppendInt(append(b, `,"exit_code":`...), int64(*l.ExitCode), 10)
	}
	b = optString(b, `,"detail":`, l.Detail)
	b = optUint(b, `,"first_seq":`, l.FirstSeq)
	b = optUint(b, `,"last_seq":`, l.LastSeq)
	b = optString(b, `,"final_hash":`, l.FinalHash)
	if len(l.Changes) > 0 {
		b = append(b, `,"changes":[`...)
		for i, c := range l.Changes {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonstr.Append(append(b, `{"path":`...), c.Path)
			b = jsonstr.Append(append(b, `,"op":`...), c.Op)
			b = optInt(b, `,"size":`, c.Size)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func appendPolicy(b []byte, p *Policy) []byte {
	b = jsonstr.Append(append(b, `{"action":`...), p.Action)
	b = jsonstr.Append(append(b, `,"name":`...), p.Name)
	b = optString(b, `,"old_hash":`, p.OldHash)
	b = optString(b, `,"new_hash":`, p.NewHash)
	b = optStrings(b, `,"errors":`, p.Errors)
	return append(b, '}')
}

func appendApproval(b []byte, a *Approval) []byte {
	b = jsonstr.Append(append(b, `{"stage":`...), a.Stage)
	b = jsonstr.Append(append(b, `,"destination":`...), a.Destination)
	b = optString(b, `,"command":`, a.Command)
	b = optString(b, `,"decided_by":`, a.DecidedBy)
	b = optString(b, `,"for":`, a.For)
	return append(b, '}')
}

func appendSecretReflected(b []byte, r *SecretReflected) []byte {
	b = jsonstr.Append(append(b, `{"secret":`...), r.Secret)
	b = jsonstr.Append(append(b, `,"host":`...), r.Host)
	b = jsonstr.Append(append(b, `,"position":`...), r.Position)
	b = strconv.AppendInt(append(b, `,"offset":`...), r.Offset, 10)
	b = strconv.AppendInt(append(b, `,"count":`...), int64(r.Count), 10)
	b = jsonstr.Append(append(b, `,"action":`...), r.Action)
	return append(b, '}')
}

func appendRefusal(b []byte, r *Refusal) []byte {
	b = jsonstr.Append(append(b, `{"principal":`...), r.Principal)
	b = jsonstr.Append(append(b, `,"action":`...), r.Action)
	b = strconv.AppendInt(append(b, `,"status":`...), int64(r.Status), 10)
	b = jsonstr.Append(append(b, `,"code":`...), r.Code)
	b = optString(b, `,"peer":`, r.Peer)
	b = optString(b, `,"request_id":`, r.RequestID)
	b = optString(b, `,"target":`, r.Target)
	return append(b, '}')
}

func appendLockdown(b []byte, l *Lockdown) []byte {
	b = jsonstr.Append(append(b, `{"action":`...), l.Action)
	b = jsonstr.Append(append(b, `,"scope":`...), l.Scope)
	b = jsonstr.Append(append(b, `,"by":`...), l.By)
	return append(b, '}')
}

func appendGap(b []byte, g *Gap) ([]byte, error) {
	b = strconv.AppendUint(append(b, `{"dropped":`...), g.Dropped, 10)
	b, err := appendTime(append(b, `,"from":`...), g.From)
	if err != nil {
		return nil, err
	}
	if b, err = appendTime(append(b, `,"to":`...), g.To); err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// appendTime appends t as time.Time.MarshalJSON does: the fast path for a
// UTC time in years 0-9999, MarshalJSON itself (and its error) otherwise.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	if _, off := t.Zone(); off == 0 && t.Year() >= 0 && t.Year() <= 9999 {
		b = append(b, '"')
		b = t.AppendFormat(b, time.RFC3339Nano)
		return append(b, '"'), nil
	}
	m, err := t.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return append(b, m...), nil
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

func optString(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	return jsonstr.Append(append(b, key...), v)
}

func optInt(b []byte, key string, v int64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), v, 10)
}

func optUint(b []byte, key string, v uint64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendUint(append(b, key...), v, 10)
}

func optStrings(b []byte, key string, v []string) []byte {
	if len(v) == 0 {
		return b
	}
	return appendStrings(append(b, key...), v)
}

// appendStrings appends a JSON array of strings; nil is null, as
// encoding/json has it.
func appendStrings(b []byte, v []string) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonstr.Append(b, s)
	}
	return append(b, ']')
}
