package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"airlock/audit"
	"airlock/client"
	"airlock/policies"
	"airlock/proxy"
)

// AccessBackend is the part of the control API agents use to understand
// and ask about egress: a policy's explanation of a request, and access
// requests a person decides. A Backend without it answers "unsupported".
type AccessBackend interface {
	Explain(ctx context.Context, policy, request string) (client.Explanation, error)
	RequestAccess(ctx context.Context, id string, req client.AccessRequest) (client.Approval, error)
	// Report writes a sandbox's review report (`airlock report`) to w
	// as HTML or Markdown.
	Report(ctx context.Context, id string, html bool, w io.Writer) error
}

var _ AccessBackend = (*Appliance)(nil)

// accessRoutes adds GET /policies/explain and POST /sandboxes/{id}/access.
func (a *API) accessRoutes(mux *http.ServeMux, v string) {
	mux.HandleFunc("GET "+v+"/policies/explain", a.access(a.explain))
	mux.HandleFunc("POST "+v+"/sandboxes/{id}/access", a.access(a.requestAccess))
	mux.HandleFunc("GET "+v+"/sandboxes/{id}/report", a.access(a.report))
}

func (a *API) access(h func(AccessBackend, http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return withBackend(a, "cannot explain policies or file access requests", h)
}

func (a *API) explain(b AccessBackend, w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ex, err := b.Explain(r.Context(), q.Get("policy"), q.Get("request"))
	a.reply(w, r, ex, err)
}

func (a *API) requestAccess(b AccessBackend, w http.ResponseWriter, r *http.Request) {
	var req client.AccessRequest
	if !a.decode(w, r, &req) {
		return
	}
	ap, err := b.RequestAccess(r.Context(), r.PathValue("id"), req)
	a.reply(w, r, ap, err)
}

func (a *API) report(b AccessBackend, w http.ResponseWriter, r *http.Request) {
	html, ctype := true, "text/html; charset=utf-8"
	switch f := r.URL.Query().Get("format"); f {
	case "", "html":
	case "markdown", "md":
		html, ctype = false, "text/markdown; charset=utf-8"
	default:
		a.fail(w, r, client.Errorf(client.CodeInvalid, "format=%q: want html or markdown", f))
		return
	}
	var buf bytes.Buffer // rendered whole, so a failure is still a JSON error
	if err := b.Report(r.Context(), r.PathValue("id"), html, &buf); err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", ctype)
	_, _ = buf.WriteTo(w)
}

// Report builds the review report of sandbox id from the event store
// (its sandbox may be gone: the record stays).
func (a *Appliance) Report(ctx context.Context, id string, html bool, w io.Writer) error {
	st := a.pipeline.Store()
	if st == nil {
		return client.Errorf(client.CodeUnavailable, "this appliance keeps no event store (audit.store)")
	}
	if err := a.pipeline.Flush(ctx); err != nil {
		return err
	}
	r, err := audit.BuildReport(ctx, st, id)
	if errors.Is(err, audit.ErrNoEvents) {
		return client.Errorf(client.CodeNotFound, "no events of sandbox %q: nothing to report", id)
	}
	if err != nil {
		return fmt.Errorf("report %s: %w", id, err)
	}
	if html {
		return r.HTML(w)
	}
	return r.Markdown(w)
}

// Explain decides request under the named policy (or the default one)
// and reports the rules considered. It reads the policy only.
func (a *Appliance) Explain(_ context.Context, policy, request string) (client.Explanation, error) {
	if policy == "" {
		policy = a.cfg.DefaultPolicy
	}
	ref, ok := a.policies.Get(policy)
	if !ok {
		return client.Explanation{}, client.Errorf(client.CodeNotFound, "no policy %q (list them with `airlock policy list` or GET /v1/policies)", policy)
	}
	if strings.TrimSpace(request) == "" {
		return client.Explanation{}, client.Errorf(client.CodeInvalid, "request: give a line like \"GET https://host/path\", \"dns NAME\" or \"connect HOST:PORT\"")
	}
	req, err := policies.ParseRequest(request)
	if err != nil {
		return client.Explanation{}, client.Errorf(client.CodeInvalid, "request %q: %v", request, err)
	}
	return explanation(policy, request, ref.load().Explain(req)), nil
}

func explanation(policy, request string, ex policies.Explanation) client.Explanation {
	v := ex.Verdict
	out := client.Explanation{Policy: policy, Request: request, Action: v.Action.String(),
		Category: v.Category, Rule: v.Rule.String(), Reason: v.Reason, WouldDeny: v.WouldDeny}
	for _, c := range ex.Considered {
		out.Considered = append(out.Considered, client.Consideration{Rule: c.Rule.String(), Outcome: c.Outcome})
	}
	return out
}

// RequestAccess files a held access request for sandbox id. A person
// decides it with `airlock approve` or `airlock deny`; unanswered, it
// expires after the approval timeout. An approval "for" a duration is a
// standing grant: the sandbox's requests to that destination that the
// policy says to ask about pass without asking until it ends.
func (a *Appliance) RequestAccess(ctx context.Context, id string, req client.AccessRequest) (client.Approval, error) {
	if _, err := a.Get(ctx, id); err != nil {
		return client.Approval{}, err
	}
	dest := strings.TrimSpace(req.Destination)
	if dest == "" || len(dest) > 512 || strings.ContainsAny(dest, " \t\r\n") {
		return client.Approval{}, client.Errorf(client.CodeInvalid, "destination %q: want a host, host:port or URL without spaces (at most 512 bytes)", req.Destination)
	}
	if len(req.Reason) > 1024 {
		return client.Approval{}, client.Errorf(client.CodeInvalid, "reason: at most 1024 bytes, got %d", len(req.Reason))
	}
	return a.approvals.File(id, dest, req.Reason), nil
}

// File holds an access request an agent filed (no connection waits on
// it) until a decision or the timeout, and returns it as held.
func (a *Approvals) File(sandbox, dest, reason string) client.Approval {
	h := proxy.Hold{Sandbox: sandbox, Destination: dest,
		Verdict: policies.Verdict{Rule: policies.Rule{Name: "request_access"}}}
	hd := a.add(h)
	a.mu.Lock()
	hd.info.Reason = reason
	info := hd.info
	a.mu.Unlock()
	h.ID = info.ID
	a.event(h, info)
	go a.expire(info.ID, hd.done)
	return info
}

// expire ends a filed request that nobody decided in time.
func (a *Approvals) expire(id string, done <-chan bool) {
	t := time.NewTimer(a.timeout)
	defer t.Stop()
	select {
	case <-done: // decided
	case <-t.C:
		a.finish(id, "expired", "timeout", "", false)
	}
}
