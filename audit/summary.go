package audit

import (
	"fmt"
	"strings"
	"time"
)

// Summary is a one-line description of an event's payload for people,
// used by `airlock logs` and the report.
func Summary(e *Event) string {
	switch {
	case e.DNS != nil:
		return dnsSummary(e.DNS)
	case e.Flow != nil:
		return flowSummary(e.Flow)
	case e.HTTP != nil:
		return httpSummary(e.HTTP)
	case e.Drop != nil:
		d := e.Drop
		return fmt.Sprintf("%s %s -> %s%s x%d", d.Protocol, d.Source, d.Dest, portSuffix(d.Port), d.Count)
	case e.Exec != nil:
		return execSummary(e.Exec)
	case e.Lifecycle != nil:
		return lifecycleSummary(e.Lifecycle)
	case e.Policy != nil:
		p := e.Policy
		s := p.Action + " " + p.Name
		if len(p.Errors) > 0 {
			s += ": " + strings.Join(p.Errors, "; ")
		}
		return s
	case e.Approval != nil:
		a := e.Approval
		return strings.TrimSpace(fmt.Sprintf("%s %s %s", a.Stage, a.Destination, a.DecidedBy))
	case e.Gap != nil:
		return fmt.Sprintf("%d events dropped %s .. %s", e.Gap.Dropped, e.Gap.From.Format(time.RFC3339), e.Gap.To.Format(time.RFC3339))
	case e.Refusal != nil:
		return fmt.Sprintf("refused %d %s to %q: %s", e.Refusal.Status, e.Refusal.Action, e.Refusal.Principal, e.Reason)
	case e.Preview != nil:
		return fmt.Sprintf("preview %s %s port %d %s: %s", e.ID, e.Preview.Stage, e.Preview.Port, e.Preview.Principal, e.Reason)
	case e.Ingress != nil:
		in := e.Ingress
		s := fmt.Sprintf("ingress %s %s %s %d by %q from %s", e.ID, in.Method, in.Path, in.Status, in.Principal, in.Client)
		if in.Count > 0 {
			s += fmt.Sprintf(" x%d", in.Count)
		}
		return s
	case e.Lockdown != nil:
		return fmt.Sprintf("lockdown %s (%s) by %s", e.Lockdown.Action, e.Lockdown.Scope, e.Lockdown.By)
	case e.SecretReflected != nil:
		r := e.SecretReflected
		return fmt.Sprintf("secret %s %s by %s at %s x%d", r.Secret, r.Action, r.Host, r.Position, r.Count)
	}
	return ""
}

func portSuffix(p uint16) string {
	if p == 0 {
		return ""
	}
	return fmt.Sprintf(":%d", p)
}

func dnsSummary(d *DNS) string {
	s := fmt.Sprintf("%s %s %s", d.QType, strings.TrimSuffix(d.QName, "."), d.RCode)
	if len(d.Answers) > 0 {
		s += " -> " + strings.Join(d.Answers, ",")
	}
	if d.Guard != "" {
		s += " guard=" + d.Guard
	}
	return s
}

func flowSummary(f *Flow) string {
	dst := firstNonEmpty(f.Host, f.SNI, f.OrigDst)
	if f.Stage == "close" {
		return fmt.Sprintf("close %s up=%d down=%d %dms %s", dst, f.BytesUp, f.BytesDown, f.DurationMS, f.CloseReason)
	}
	s := fmt.Sprintf("%s %s", f.Stage, dst)
	if f.OrigDst != "" && f.OrigDst != dst {
		s += " (" + f.OrigDst + ")"
	}
	if f.Handling != "" {
		s += " " + f.Handling
	}
	return s
}

func httpSummary(h *HTTP) string {
	s := fmt.Sprintf("%s %s://%s%s", h.Method, h.Scheme, h.Host, h.Path)
	if h.Status != 0 {
		s += fmt.Sprintf(" %d", h.Status)
	}
	if h.Package != nil {
		s += fmt.Sprintf(" pkg=%s:%s@%s", h.Package.Ecosystem, h.Package.Name, h.Package.Version)
	}
	return s
}

func execSummary(x *Exec) string {
	s := x.Stage + " " + strings.Join(x.Argv, " ")
	if x.ExitCode != nil {
		s += fmt.Sprintf(" exit=%d", *x.ExitCode)
	}
	if x.DurationMS > 0 {
		s += fmt.Sprintf(" %dms", x.DurationMS)
	}
	if x.TimedOut {
		s += " timed-out"
	}
	return s
}

func lifecycleSummary(l *Lifecycle) string {
	s := l.Stage
	for _, kv := range [][2]string{{"image", l.Image}, {"policy", l.Policy}, {"address", l.Address}} {
		if kv[1] != "" {
			s += " " + kv[0] + "=" + kv[1]
		}
	}
	if l.ExitCode != nil {
		s += fmt.Sprintf(" exit=%d", *l.ExitCode)
	}
	if l.LastSeq > 0 {
		s += fmt.Sprintf(" records=%d..%d", l.FirstSeq, l.LastSeq)
	}
	if l.Detail != "" {
		s += " " + l.Detail
	}
	return s
}
