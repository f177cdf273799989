package proxy

import (
	"context"
	"errors"

	"airlock/audit"
	"airlock/policies"
)

// ask holds a request (or connection) for a human decision. No approver,
// an error or the hold timing out all mean deny; each step is an event.
func (p *Proxy) ask(ctx context.Context, f *flow, id, dest string, v policies.Verdict) policies.Verdict {
	p.emitApproval(f, id, "held", dest, v)
	approved := false
	stage := "denied"
	if p.cfg.Approver != nil {
		actx, cancel := context.WithTimeout(ctx, p.cfg.AskTimeout)
		ok, err := p.cfg.Approver.Ask(actx, Hold{ID: id, Sandbox: f.sb.ID, Destination: dest, Verdict: v})
		if errors.Is(actx.Err(), context.DeadlineExceeded) {
			stage = "expired"
		}
		cancel()
		approved = err == nil && ok
	}
	if approved {
		p.emitApproval(f, id, "approved", dest, v)
		v.Action = policies.ActionAllow
		return v
	}
	if stage == "denied" && p.cfg.Approver == nil {
		stage = "expired"
	}
	p.emitApproval(f, id, stage, dest, v)
	d := internalDeny(ruleAsk, "the request needs approval and was not approved ("+stage+")")
	d.Category, d.Kind, d.Cat = v.Category, v.Kind, v.Cat
	return d
}

func (p *Proxy) emitApproval(f *flow, id, stage, dest string, v policies.Verdict) {
	e := audit.New(audit.KindApproval, f.sb.ID)
	e.ID = id
	verdictFields(&e, v)
	e.Approval = &audit.Approval{Stage: stage, Destination: dest}
	p.cfg.Emitter.Emit(e)
}
