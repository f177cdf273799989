package serve

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"airlock/client"
)

// Defaults are the appliance's defaults for what a create or exec leaves
// unset, so a principal's limits are checked against what will really
// apply (Appliance.Serve fills them from the config).
type Defaults struct {
	Policy      string
	Image       string
	Lifetime    time.Duration
	ExecTimeout time.Duration
}

// quotas counts each principal's creates in flight, so that concurrent
// creates cannot together pass a principal's sandbox quota.
type quotas struct {
	mu       sync.Mutex
	inflight map[string]int
}

// admitCreate checks a create against the caller's quota and limits,
// fills in bounded defaults, and reserves one of the caller's sandboxes.
// The returned func records the new sandbox's owner (or gives the
// reservation back on failure); it must be called once the create ends.
func (a *API) admitCreate(w http.ResponseWriter, r *http.Request, req *client.CreateRequest) (func(id string, err error), bool) {
	p := PrincipalOf(r.Context())
	if p == nil {
		p = localPrincipal
	}
	if e, reason := a.createLimits(p, req); e != nil {
		a.refuseErr(w, r, e, reason)
		return nil, false
	}
	if e := socketWorkspace(r.Context(), req.Workspace); e != nil {
		a.refuseErr(w, r, e, "workspace not the caller's")
		return nil, false
	}
	if e := a.reserve(r, p); e != nil {
		a.refuseErr(w, r, e, "quota.sandboxes reached")
		return nil, false
	}
	return func(id string, err error) {
		// Owner and reservation change together: a count in between would
		// see the new sandbox twice (owned and in flight).
		a.quota.mu.Lock()
		defer a.quota.mu.Unlock()
		a.quota.inflight[p.Name]--
		if client.IsCode(err, client.CodeQuotaExceeded) { // the appliance's own limit (sandbox.max)
			a.emitRefusal(r, p.Name, &refusal{err: client.Errorf(client.CodeQuotaExceeded, "%v", err), reason: "sandbox.max reached"})
		}
		if err == nil && id != "" {
			if serr := a.owners().Set(id, p.Name); serr != nil {
				a.log().Error("api: record sandbox owner", "sandbox", id, "principal", p.Name, "err", serr)
			}
		}
	}, true
}

// socketWorkspace refuses a host workspace to a caller on the local
// socket that is not root and does not own the directory: the socket is
// open to the airlock group, and a bind chowns the tree to the sandbox user
// (a copy reads it as root), so naming /etc or another user's home would
// hand it over. TCP principals need the admin scope (createLimits).
func socketWorkspace(ctx context.Context, dir string) *client.Error {
	uid, ok := peerUID(ctx)
	if dir == "" || !ok || uid == 0 {
		return nil
	}
	st, err := os.Stat(dir)
	if err != nil {
		return client.Errorf(client.CodeInvalid, "workspace %q: %v", dir, err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || sys.Uid != uid {
		return client.Errorf(client.CodeForbidden, "workspace %q is not yours (uid %d): on the local socket a host directory must be owned by its caller, or the caller must be root", dir, uid)
	}
	return nil
}

// createLimits checks the policy, image, lifetime, exec timeout and host
// workspace of a create against the principal's quota and scopes (403 with
// what is allowed).
func (a *API) createLimits(p *Principal, req *client.CreateRequest) (*client.Error, string) {
	// A host directory is root's to hand over (a bind chowns it to the
	// sandbox user, a copy reads it as root): only an admin, or a caller on
	// the local socket, names one.
	if req.Workspace != "" && !p.Admin() {
		return client.Errorf(client.CodeForbidden, "principal %q may not give a host directory as workspace (only an admin may): use workspace_git, or copy files in with sandbox cp",
			p.Name), "workspace not allowed"
	}
	q := p.Quota
	if len(q.Policies) > 0 {
		pol := firstNonEmpty(req.Policy, a.Defaults.Policy)
		if !slices.Contains(q.Policies, pol) {
			return client.Errorf(client.CodeForbidden, "principal %q may not use policy %q: allowed are %s (quota.policies)",
				p.Name, pol, strings.Join(q.Policies, ", ")), "policy not allowed"
		}
	}
	if len(q.Images) > 0 {
		if req.Template != "" {
			return client.Errorf(client.CodeForbidden, "principal %q may not start from a template: its images are limited to %s (quota.images)",
				p.Name, strings.Join(q.Images, ", ")), "template not allowed"
		}
		img := firstNonEmpty(req.Image, a.Defaults.Image)
		if !slices.Contains(q.Images, img) {
			return client.Errorf(client.CodeForbidden, "principal %q may not use image %q: allowed are %s (quota.images)",
				p.Name, img, strings.Join(q.Images, ", ")), "image not allowed"
		}
	}
	if e := bound(&req.Lifetime, a.Defaults.Lifetime, q.MaxLifetime.Duration, p.Name, "lifetime", "quota.max_lifetime"); e != nil {
		return e, "lifetime over quota.max_lifetime"
	}
	if e := bound(&req.ExecTimeout, a.Defaults.ExecTimeout, q.MaxExecTimeout.Duration, p.Name, "exec_timeout", "quota.max_exec_timeout"); e != nil {
		return e, "exec timeout over quota.max_exec_timeout"
	}
	return nil, ""
}

// bound refuses a duration over max; an unset one becomes the default,
// or max when the default is longer.
func bound(d *client.Duration, def, max time.Duration, who, field, key string) *client.Error {
	if max <= 0 {
		return nil
	}
	if time.Duration(*d) > max {
		return client.Errorf(client.CodeForbidden, "%s %s is over principal %q's limit of %s (%s)", field, time.Duration(*d), who, max, key)
	}
	if *d == 0 {
		*d = client.Duration(min(max, def))
		if def <= 0 {
			*d = client.Duration(max)
		}
	}
	return nil
}

// reserve takes one of the principal's sandboxes, counting the live ones
// it owns and its creates still in flight.
func (a *API) reserve(r *http.Request, p *Principal) *client.Error {
	a.quota.mu.Lock()
	defer a.quota.mu.Unlock()
	if a.quota.inflight == nil {
		a.quota.inflight = map[string]int{}
	}
	if n := p.Quota.Sandboxes; n > 0 {
		live, err := a.Backend.List(r.Context())
		if err != nil {
			return client.Errorf(client.CodeUnavailable, "count sandboxes for the quota: %v", err)
		}
		own := 0
		for _, sb := range live {
			if o, ok := a.owners().Owner(sb.ID); ok && o == p.Name {
				own++
			}
		}
		if own+a.quota.inflight[p.Name] >= n {
			return client.Errorf(client.CodeQuotaExceeded, "principal %q runs its maximum of %d sandboxes (quota.sandboxes): remove one first", p.Name, n)
		}
	}
	a.quota.inflight[p.Name]++
	return nil
}

// admitExec checks a command against the caller's limits: a terminal
// needs the attach scope too, and a timeout may not pass
// quota.max_exec_timeout (an unset one runs under the sandbox's exec
// timeout, which its create bounded).
func (a *API) admitExec(w http.ResponseWriter, r *http.Request, req *client.ExecRequest) bool {
	p := PrincipalOf(r.Context())
	if p == nil {
		return true
	}
	if req.TTY && !p.Has(ScopeAttach) {
		a.refuseErr(w, r, client.Errorf(client.CodeForbidden, "principal %q lacks the scope %q that a terminal exec needs", p.Name, ScopeAttach), "missing scope attach")
		return false
	}
	if max := p.Quota.MaxExecTimeout.Duration; max > 0 && time.Duration(req.Timeout) > max {
		a.refuseErr(w, r, client.Errorf(client.CodeForbidden, "timeout %s is over principal %q's limit of %s (quota.max_exec_timeout)",
			time.Duration(req.Timeout), p.Name, max), "exec timeout over quota.max_exec_timeout")
		return false
	}
	return true
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
