package serve

import (
	"context"
	"net/http"

	"airlock/client"
)

// PreviewBackend is the part of a Backend that exposes sandbox ports on
// the preview listener. A Backend without it answers "unsupported".
type PreviewBackend interface {
	Expose(ctx context.Context, id string, req client.ExposeRequest, by string) (client.Preview, error)
	Previews(ctx context.Context, id string) ([]client.Preview, error)
	Unexpose(ctx context.Context, id, preview, by string) error
}

var _ PreviewBackend = (*Appliance)(nil)

func (a *API) previewRoutes(mux *http.ServeMux, v string) {
	mux.HandleFunc("POST "+v+"/sandboxes/{id}/previews", a.previewer(a.expose))
	mux.HandleFunc("GET "+v+"/sandboxes/{id}/previews", a.previewer(a.listPreviews))
	mux.HandleFunc("DELETE "+v+"/sandboxes/{id}/previews/{preview}", a.previewer(a.unexpose))
}

func (a *API) previewer(h func(PreviewBackend, http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		pb, ok := backendAs[PreviewBackend](a, w, r, "has no preview listener")
		if !ok {
			return
		}
		h(pb, w, r)
	}
}

// caller names the principal of a request ("local" on the unix socket).
func caller(r *http.Request) string {
	if p := PrincipalOf(r.Context()); p != nil && p.Name != "" {
		return p.Name
	}
	return "local"
}

func (a *API) expose(b PreviewBackend, w http.ResponseWriter, r *http.Request) {
	var req client.ExposeRequest
	if !a.decode(w, r, &req) {
		return
	}
	if err := a.checkPrincipalNames(req.To); err != nil {
		a.fail(w, r, err)
		return
	}
	p, err := b.Expose(r.Context(), r.PathValue("id"), req, caller(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, p)
}

func (a *API) listPreviews(b PreviewBackend, w http.ResponseWriter, r *http.Request) {
	ps, err := b.Previews(r.Context(), r.PathValue("id"))
	a.reply(w, r, ps, err)
}

func (a *API) unexpose(b PreviewBackend, w http.ResponseWriter, r *http.Request) {
	if err := b.Unexpose(r.Context(), r.PathValue("id"), r.PathValue("preview"), caller(r)); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// checkPrincipalNames refuses a preview "to" a principal the appliance does
// not know: its link would name, in every ingress event, someone who never
// had it. "local" (the unix socket's caller) is always known.
func (a *API) checkPrincipalNames(names []string) error {
	ps := a.currentPrincipals()
	for i, n := range names {
		if n == "local" {
			continue
		}
		if _, ok := ps.Get(n); !ok {
			return client.Errorf(client.CodeInvalid, "to[%d]: no principal named %q (airlock principal ls)", i, n)
		}
	}
	return nil
}
