package serve

import (
	"context"
	"sort"
	"sync"
	"time"

	"airlock/audit"
	"airlock/client"
	"airlock/internal/randid"
	"airlock/proxy"
)

// Approvals holds requests the policy said to ask about until a human
// decides (through the control API) or the hold times out (deny). An
// approval "for" a duration lets the same sandbox reach the same
// destination without asking again until it expires. It implements
// proxy.Approver.
type Approvals struct {
	emit    audit.Emitter
	timeout time.Duration
	command func(sandbox string) string // the command running at the time
	now     func() time.Time

	mu     sync.Mutex
	held   map[string]*hold
	grants map[grantKey]time.Time
	recent []client.Approval // decided, newest last, bounded
}

type hold struct {
	info client.Approval
	done chan bool
}

type grantKey struct{ sandbox, dest string }

var _ proxy.Approver = (*Approvals)(nil)

const maxRecentApprovals = 100

// newApprovals returns an empty set. timeout bounds every hold; command
// (may be nil) names the command a sandbox is running.
func newApprovals(emit audit.Emitter, timeout time.Duration, command func(string) string) *Approvals {
	if command == nil {
		command = func(string) string { return "" }
	}
	return &Approvals{emit: emit, timeout: timeout, command: command, now: time.Now,
		held: map[string]*hold{}, grants: map[grantKey]time.Time{}}
}

// Ask holds h until a decision, the timeout or ctx's end (proxy.Approver).
func (a *Approvals) Ask(ctx context.Context, h proxy.Hold) (bool, error) {
	if a.granted(h.Sandbox, h.Destination) {
		a.event(h, client.Approval{State: "approved", DecidedBy: "standing approval", Destination: h.Destination})
		return true, nil
	}
	hd := a.add(h)
	a.event(h, hd.info)
	t := time.NewTimer(a.timeout)
	defer t.Stop()
	select {
	case ok := <-hd.done:
		return ok, nil
	case <-t.C:
		a.finish(hd.info.ID, "expired", "timeout", "", false)
		return false, nil
	case <-ctx.Done():
		a.finish(hd.info.ID, "expired", "client went away", "", false)
		return false, ctx.Err()
	}
}

func (a *Approvals) granted(sandbox, dest string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := grantKey{sandbox, dest}
	until, ok := a.grants[k]
	if ok && a.now().After(until) {
		delete(a.grants, k)
		return false
	}
	return ok
}

func (a *Approvals) add(h proxy.Hold) *hold {
	now := a.now()
	id := h.ID
	if id == "" {
		id = "ap-" + randid.Hex(8)
	}
	hd := &hold{done: make(chan bool, 1), info: client.Approval{
		ID: id, Sandbox: h.Sandbox, Destination: h.Destination, Category: h.Verdict.Category,
		Rule: h.Verdict.Rule.String(), Command: a.command(h.Sandbox), Held: now,
		Expires: now.Add(a.timeout), State: "held",
	}}
	a.mu.Lock()
	a.held[id] = hd
	a.mu.Unlock()
	return hd
}

func (a *Approvals) event(h proxy.Hold, info client.Approval) {
	e := audit.New(audit.KindApproval, h.Sandbox)
	e.ID = h.ID
	e.Category = h.Verdict.Category
	e.Rule = h.Verdict.Rule.String()
	e.Verdict = map[string]string{"held": "ask", "approved": "allow"}[info.State]
	if e.Verdict == "" {
		e.Verdict = "deny"
	}
	e.Approval = &audit.Approval{Stage: info.State, Destination: h.Destination, Command: info.Command,
		DecidedBy: info.DecidedBy, For: info.For}
	a.emit.Emit(e)
}

// finish ends a hold; it returns false if it was no longer held.
func (a *Approvals) finish(id, state, by, forWhat string, approve bool) (client.Approval, bool) {
	a.mu.Lock()
	hd, ok := a.held[id]
	if !ok {
		a.mu.Unlock()
		return client.Approval{}, false
	}
	delete(a.held, id)
	hd.info.State, hd.info.DecidedBy, hd.info.For = state, by, forWhat
	a.recent = append(a.recent, hd.info)
	if len(a.recent) > maxRecentApprovals {
		a.recent = a.recent[len(a.recent)-maxRecentApprovals:]
	}
	a.mu.Unlock()
	hd.done <- approve
	a.event(proxy.Hold{ID: id, Sandbox: hd.info.Sandbox, Destination: hd.info.Destination}, hd.info)
	return hd.info, true
}

// Decide applies a human decision to a held request. by names who decided
// (it goes into the audit event).
func (a *Approvals) Decide(id string, d client.Decision, by string) (client.Approval, error) {
	if by == "" {
		by = "unknown"
	}
	state, forWhat := "denied", ""
	if d.Approve {
		state, forWhat = "approved", "once"
		if !d.Once && d.For > 0 {
			forWhat = time.Duration(d.For).String()
		}
	}
	a.mu.Lock()
	hd, ok := a.held[id]
	a.mu.Unlock()
	if !ok {
		return client.Approval{}, client.Errorf(client.CodeNotFound,
			"no held request %q: it may have been decided or expired (list them with `airlock approvals`)", id)
	}
	if d.Approve && forWhat != "once" {
		a.mu.Lock()
		a.grants[grantKey{hd.info.Sandbox, hd.info.Destination}] = a.now().Add(time.Duration(d.For))
		a.mu.Unlock()
	}
	info, ok := a.finish(id, state, by, forWhat, d.Approve)
	if !ok {
		return client.Approval{}, client.Errorf(client.CodeConflict, "request %q was decided by someone else or expired", id)
	}
	return info, nil
}

// List returns held requests (oldest first) then recent decisions.
func (a *Approvals) List() []client.Approval {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]client.Approval, 0, len(a.held)+len(a.recent))
	for _, h := range a.held {
		out = append(out, h.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Held.Before(out[j].Held) })
	return append(out, a.recent...)
}

// Forget drops a sandbox's standing approvals (at destroy).
func (a *Approvals) Forget(sandbox string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := range a.grants {
		if k.sandbox == sandbox {
			delete(a.grants, k)
		}
	}
}
