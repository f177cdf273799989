package serve

import (
	"context"
	"net/http"

	"airlock/client"
)

// PrincipalsBackend reloads the principals file (POST
// /v1/principals/reload, as SIGHUP does). A Backend without it answers
// "unsupported".
type PrincipalsBackend interface {
	ReloadPrincipals(ctx context.Context, by string) (client.PrincipalsReload, error)
}

var _ PrincipalsBackend = (*Appliance)(nil)

// principalRoutes adds POST /v1/principals/reload and GET /v1/openapi.json.
func (a *API) principalRoutes(mux *http.ServeMux, v string) {
	mux.HandleFunc("POST "+v+"/principals/reload", a.reloadPrincipals)
	mux.HandleFunc("GET "+v+"/openapi.json", a.openapi)
}

func (a *API) reloadPrincipals(w http.ResponseWriter, r *http.Request) {
	b, ok := backendAs[PrincipalsBackend](a, w, r, "has no principals")
	if !ok {
		return
	}
	res, err := b.ReloadPrincipals(r.Context(), Peer(r.Context()))
	a.reply(w, r, res, err)
}

// ReloadPrincipals re-reads control.principals_file; a broken file keeps
// the running principals and the error says why, with positions.
func (a *Appliance) ReloadPrincipals(_ context.Context, by string) (client.PrincipalsReload, error) {
	s := a.principals.Load()
	if s == nil || s.file == "" {
		return client.PrincipalsReload{}, client.Errorf(client.CodeUnsupported,
			"no principals file: set control.principals_file (principals are the callers of control.tcp)")
	}
	if err := s.Reload(by); err != nil {
		return client.PrincipalsReload{}, client.Errorf(client.CodeInvalid, "%v; the running principals stay", err)
	}
	return client.PrincipalsReload{Principals: s.Current().Names()}, nil
}
