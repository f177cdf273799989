package mcptools

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/audit"
	"airlock/client"
)

type egressIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox, from create_sandbox"`
	Limit     int    `json:"limit,omitempty" jsonschema:"how many recent decisions to look at (default 50, at most 500)"`
}

// decision is one egress decision as an agent reads it.
type decision struct {
	Time        string `json:"time"`
	Kind        string `json:"kind"`
	Verdict     string `json:"verdict"`
	Destination string `json:"destination"`
	Rule        string `json:"rule,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Category    string `json:"category,omitempty"`
}

type egressOut struct {
	Denied    int        `json:"denied"`
	Decisions []decision `json:"decisions"`
}

// egressKinds are the event kinds that carry an egress decision.
var egressKinds = map[audit.Kind]bool{"dns": true, "flow": true, "http": true, "drop": true, "approval": true}

func (t *Tools) egressLog(ctx context.Context, req *mcp.CallToolRequest, in egressIn) (*mcp.CallToolResult, egressOut, error) {
	c, err := t.For(ctx, req)
	if err != nil {
		return nil, egressOut{}, err
	}
	limit := in.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 500)
	if _, err := c.Get(ctx, in.SandboxID); err != nil {
		return nil, egressOut{}, fmt.Errorf("egress_log: %w", err)
	}
	var ds []decision
	err = c.Logs(ctx, client.LogQuery{Sandbox: in.SandboxID, Limit: 4 * limit, Newest: true}, func(e audit.Event) error {
		if egressKinds[e.Kind] && e.Verdict != "" && !isCloseRecord(e) {
			ds = append(ds, toDecision(e))
		}
		return nil
	})
	if err != nil {
		return nil, egressOut{}, fmt.Errorf("egress_log: %w", err)
	}
	// Newest first, then denials before the rest.
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].Time > ds[j].Time })
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].Verdict == "deny" && ds[j].Verdict != "deny" })
	out := egressOut{Decisions: []decision{}}
	for _, d := range ds {
		if d.Verdict == "deny" {
			out.Denied++
		}
	}
	if len(ds) > limit {
		ds = ds[:limit]
	}
	out.Decisions = append(out.Decisions, ds...)
	return nil, out, nil
}

func isCloseRecord(e audit.Event) bool { return e.Flow != nil && e.Flow.Stage == "close" }

func toDecision(e audit.Event) decision {
	d := decision{Time: e.Time.UTC().Format(time.RFC3339Nano), Kind: string(e.Kind), Verdict: e.Verdict,
		Rule: e.Rule, Reason: e.Reason, Category: e.Category}
	switch {
	case e.HTTP != nil:
		d.Destination = e.HTTP.Method + " " + e.HTTP.Scheme + "://" + e.HTTP.Host + e.HTTP.Path
	case e.DNS != nil:
		d.Destination = e.DNS.QName + " " + e.DNS.QType
	case e.Flow != nil:
		d.Destination = firstNonEmpty(e.Flow.Host, e.Flow.SNI, e.Flow.OrigDst)
	case e.Drop != nil:
		d.Destination = fmt.Sprintf("%s %s:%d", e.Drop.Protocol, e.Drop.Dest, e.Drop.Port)
	case e.Approval != nil:
		d.Destination = e.Approval.Destination
	}
	return d
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

type accessIn struct {
	SandboxID   string `json:"sandbox_id" jsonschema:"the sandbox that needs the access"`
	Destination string `json:"destination,omitempty" jsonschema:"host, host:port or URL to ask for (omit when checking approval_id)"`
	Reason      string `json:"reason,omitempty" jsonschema:"one sentence for the person deciding: why the task needs it"`
	ApprovalID  string `json:"approval_id,omitempty" jsonschema:"check an earlier request instead of filing a new one"`
	WaitSeconds int    `json:"wait_seconds,omitempty" jsonschema:"wait up to this many seconds (at most 300) for the decision"`
}

type accessOut struct {
	ApprovalID  string `json:"approval_id"`
	Status      string `json:"status"` // pending | granted | denied
	Destination string `json:"destination"`
	DecidedBy   string `json:"decided_by,omitempty"`
	Hint        string `json:"hint"`
}

func (t *Tools) requestAccess(ctx context.Context, req *mcp.CallToolRequest, in accessIn) (*mcp.CallToolResult, accessOut, error) {
	c, err := t.For(ctx, req)
	if err != nil {
		return nil, accessOut{}, err
	}
	id := in.ApprovalID
	if id == "" {
		if in.Destination == "" {
			return nil, accessOut{}, fmt.Errorf("request_access: give a destination to ask for, or the approval_id of an earlier request")
		}
		ap, err := c.RequestAccess(ctx, in.SandboxID, client.AccessRequest{Destination: in.Destination, Reason: in.Reason})
		if err != nil {
			return nil, accessOut{}, fmt.Errorf("request_access: %w", err)
		}
		id = ap.ID
	}
	deadline := time.Now().Add(time.Duration(min(max(in.WaitSeconds, 0), 300)) * time.Second)
	for {
		ap, err := approval(ctx, c, in.SandboxID, id)
		if err != nil {
			return nil, accessOut{}, fmt.Errorf("request_access: %w", err)
		}
		out := accessOut{ApprovalID: ap.ID, Status: accessStatus(ap.State), Destination: ap.Destination, DecidedBy: ap.DecidedBy}
		out.Hint = map[string]string{
			"pending": "a person decides with `airlock approve " + ap.ID + "`; call request_access again with this approval_id",
			"granted": "granted: retry the request",
			"denied":  "denied (or expired): do not retry; find another way or ask the user",
		}[out.Status]
		if out.Status != "pending" || time.Now().After(deadline) {
			return nil, out, nil
		}
		select {
		case <-ctx.Done():
			return nil, out, nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func approval(ctx context.Context, c *client.Client, sandbox, id string) (client.Approval, error) {
	as, err := c.Approvals(ctx)
	if err != nil {
		return client.Approval{}, err
	}
	for _, a := range as {
		if a.ID == id && a.Sandbox == sandbox {
			return a, nil
		}
	}
	return client.Approval{}, fmt.Errorf("no access request %q of sandbox %q (it may be older than the appliance's memory of decisions)", id, sandbox)
}

func accessStatus(state string) string {
	switch state {
	case "held":
		return "pending"
	case "approved":
		return "granted"
	}
	return "denied"
}
