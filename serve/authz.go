package serve

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"airlock/audit"
	"airlock/client"
)

const keyPrincipal ctxKey = 100

// PrincipalOf is the authenticated caller of an API request (nil outside
// one).
func PrincipalOf(ctx context.Context) *Principal {
	p, _ := ctx.Value(keyPrincipal).(*Principal)
	return p
}

// authRequired: the listener checks bearer tokens (TCP). Without a token
// or principals (the unix socket), the caller is the local admin.
func (a *API) authRequired() bool { return a.Token != "" || a.Principals != nil }

func (a *API) currentPrincipals() *Principals {
	if a.Principals != nil {
		return a.Principals.Current() // holds control.token_file's token too
	}
	return (*Principals)(nil).withToken(a.Token)
}

// refusal is a request the API turns away: the error the caller gets and
// the reason the audit record keeps.
type refusal struct {
	err    *client.Error
	reason string
	target string
}

// authorize names the caller, checks the route's scope and, for a caller
// that is not an admin, that the sandbox or approval it acts on is its
// own. A refusal is answered and written as a `refusal` event.
func (a *API) authorize(w http.ResponseWriter, r *http.Request, mux *http.ServeMux) (*http.Request, bool) {
	p, ref := a.authenticate(r)
	if ref == nil {
		ctx := audit.WithPrincipal(context.WithValue(r.Context(), keyPrincipal, p), p.Name) // named by the records of what it does
		r = r.WithContext(ctx)
		if a.authRequired() {
			r = r.WithContext(WithPeer(r.Context(), p.Name+"@"+r.RemoteAddr))
		}
		ref = a.permit(r, mux, p)
	}
	if ref != nil {
		a.refuse(w, r, p, ref)
		return r, false
	}
	return r, true
}

func (a *API) authenticate(r *http.Request) (*Principal, *refusal) {
	if !a.authRequired() {
		return localPrincipal, nil
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return nil, &refusal{err: client.Errorf(client.CodeUnauthorized, "missing bearer token: send Authorization: Bearer TOKEN"),
			reason: "no bearer token"}
	}
	p, ok := a.currentPrincipals().Lookup(tok)
	if !ok {
		return nil, &refusal{err: client.Errorf(client.CodeUnauthorized, "missing or wrong bearer token (unknown or revoked)"),
			reason: "unknown or revoked token"}
	}
	return p, nil
}

// permit checks scope and ownership for the route r matches.
func (a *API) permit(r *http.Request, mux *http.ServeMux, p *Principal) *refusal {
	_, pattern := mux.Handler(r)
	if pattern == "" || pattern == "/" {
		return nil // no such route: the catch-all answers 404
	}
	if scope := routeScope(pattern); !p.Has(scope) {
		return &refusal{err: client.Errorf(client.CodeForbidden, "principal %q lacks the scope %q that %s needs", p.Name, scope, pattern),
			reason: "missing scope " + scope}
	}
	if p.Admin() {
		return nil
	}
	if id := sandboxParam(pattern, escapedPath(r)); id != "" && !a.owns(p, id) {
		return notYours(id)
	}
	if strings.HasPrefix(pattern, "POST /v1/approvals/{id}") {
		return a.permitApproval(r, p, pathParam(pattern, escapedPath(r), "id"))
	}
	return nil
}

// escapedPath is the path the way ServeMux matches it, each segment
// unescaped: {id} then reads what r.PathValue("id") will.
func escapedPath(r *http.Request) string {
	segs := strings.Split(r.URL.EscapedPath(), "/")
	for i, s := range segs {
		if u, err := url.PathUnescape(s); err == nil {
			segs[i] = u
		}
	}
	return strings.Join(segs, "/")
}

// notYours answers as if the sandbox did not exist: a principal learns
// nothing of another's sandboxes, not even that they exist.
func notYours(id string) *refusal {
	return &refusal{err: client.Errorf(client.CodeNotFound, "no sandbox %q", id),
		reason: "sandbox of another principal, or none", target: id}
}

func (a *API) permitApproval(r *http.Request, p *Principal, id string) *refusal {
	as, err := a.Backend.Approvals(r.Context())
	if err == nil {
		for _, ap := range as {
			if ap.ID == id && a.owns(p, ap.Sandbox) {
				return nil
			}
		}
	}
	return &refusal{err: client.Errorf(client.CodeNotFound, "no held request %q", id),
		reason: "approval of another principal's sandbox, or none", target: id}
}

func (a *API) owns(p *Principal, sandbox string) bool {
	if p.Admin() {
		return true
	}
	o, ok := a.owners().Owner(sandbox)
	return ok && o == p.Name
}

func (a *API) owners() *Owners {
	a.ownersOnce.Do(func() {
		if a.Owners == nil {
			a.Owners, _ = newOwners("")
		}
	})
	return a.Owners
}

// refuse answers a refusal and records it. No token is ever logged.
func (a *API) refuse(w http.ResponseWriter, r *http.Request, p *Principal, ref *refusal) {
	name := ""
	if p != nil {
		name = p.Name
	}
	a.log().Warn("api: refused", "request_id", RequestID(r.Context()), "principal", name, "method", r.Method,
		"path", r.URL.Path, "status", ref.err.Status, "reason", ref.reason)
	a.emitRefusal(r, name, ref)
	a.fail(w, r, ref.err)
}

func (a *API) emitRefusal(r *http.Request, principal string, ref *refusal) {
	if a.Events == nil {
		return
	}
	e := audit.New(audit.KindRefusal, "")
	e.Reason = ref.reason
	e.Refusal = &audit.Refusal{Principal: principal, Action: r.Method + " " + r.URL.Path, Status: ref.err.Status,
		Code: ref.err.Code, Peer: r.RemoteAddr, RequestID: RequestID(r.Context()), Target: ref.target}
	a.Events.Emit(e)
}

// refuseErr answers err (a *client.Error from a quota or limit check) as
// a refusal.
func (a *API) refuseErr(w http.ResponseWriter, r *http.Request, err *client.Error, reason string) {
	a.refuse(w, r, PrincipalOf(r.Context()), &refusal{err: err, reason: reason})
}

// visible filters what a principal may see of sandboxes.
func (a *API) visible(r *http.Request, sbs []client.Sandbox) []client.Sandbox {
	p := PrincipalOf(r.Context())
	if p == nil || p.Admin() {
		return sbs
	}
	out := []client.Sandbox{}
	for _, sb := range sbs {
		if a.owns(p, sb.ID) {
			out = append(out, sb)
		}
	}
	return out
}

// visibleApprovals filters held requests to the caller's sandboxes.
func (a *API) visibleApprovals(r *http.Request, as []client.Approval) []client.Approval {
	p := PrincipalOf(r.Context())
	if p == nil || p.Admin() {
		return as
	}
	out := []client.Approval{}
	for _, ap := range as {
		if a.owns(p, ap.Sandbox) {
			out = append(out, ap)
		}
	}
	return out
}

// eventFilter wraps an event sink so a principal that is not an admin
// gets only its own sandboxes' events (appliance-wide records are the
// admins'). A query naming another's sandbox is refused.
func (a *API) eventFilter(w http.ResponseWriter, r *http.Request, q client.LogQuery, fn func(audit.Event) error) (func(audit.Event) error, bool) {
	p := PrincipalOf(r.Context())
	if p == nil || p.Admin() {
		return fn, true
	}
	if q.Sandbox != "" && !a.owns(p, q.Sandbox) {
		a.refuse(w, r, p, notYours(q.Sandbox))
		return nil, false
	}
	return func(e audit.Event) error {
		if e.Sandbox == "" || !a.owns(p, e.Sandbox) {
			return nil
		}
		return fn(e)
	}, true
}
