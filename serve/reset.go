package serve

import (
	"context"
	"net/http"

	"airlock/client"
)

// ResetBackend is what the reset endpoint needs; a Backend without it
// answers "unsupported".
type ResetBackend interface {
	Reset(ctx context.Context, id string) (client.ResetResult, error)
}

var _ ResetBackend = (*Appliance)(nil)

// Reset returns a sandbox to its create state on the same address and
// policy. Its task secrets, placeholders and held approvals stay: the
// network hook's detach, which would forget them, skips that for a sandbox
// being reset.
func (a *Appliance) Reset(ctx context.Context, id string) (client.ResetResult, error) {
	a.mu.Lock()
	a.resetting[id] = true
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.resetting, id)
		a.mu.Unlock()
	}()
	res, err := a.runner.Reset(ctx, id)
	if err != nil {
		if _, gerr := a.runner.Get(id); gerr != nil { // a failed reset destroyed it
			a.registry.Remove(id)
			a.secrets.Forget(id)
			a.approvals.Forget(id)
		}
		return client.ResetResult{}, apiError(err)
	}
	return client.ResetResult{Sandbox: a.describe(res.Sandbox), OldContainer: res.OldContainer,
		NewContainer: res.NewContainer, ImageID: res.ImageID, DurationMS: res.Duration.Milliseconds()}, nil
}

func (a *Appliance) isResetting(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.resetting[id]
}

// reset: POST /v1/sandboxes/{id}/reset.
func (a *API) reset(w http.ResponseWriter, r *http.Request) {
	b, ok := backendAs[ResetBackend](a, w, r, "cannot reset sandboxes")
	if !ok {
		return
	}
	res, err := b.Reset(r.Context(), r.PathValue("id"))
	a.reply(w, r, res, err)
}
