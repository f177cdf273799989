package serve

import (
	"context"
	"io"
	"net/http"

	"airlock/client"
)

// ShellBackend runs recorded shell sessions (POST
// /v1/sandboxes/{id}/shell); a Backend without it answers "unsupported".
type ShellBackend interface {
	// Shell runs a terminal session like AgentBackend.ExecTTY and keeps
	// its record (what was typed and shown, timed, secrets redacted) as
	// the artifact shells/EXEC_ID.jsonl, principal naming who opened it.
	Shell(ctx context.Context, id, principal string, req client.ExecRequest, stdin io.Reader, resize <-chan client.Resize, stdout io.Writer) (client.ExecResult, error)
}

var _ ShellBackend = (*Appliance)(nil)

// defaultShell is the command of a shell session that names none.
var defaultShell = []string{"/bin/sh"}

// shell opens a recorded terminal session: the attach scope (the route's)
// and the sandbox's owner (or an admin), checked by authorize.
func (a *API) shell(w http.ResponseWriter, r *http.Request) {
	var req client.ExecRequest
	if !a.decode(w, r, &req) {
		return
	}
	req.TTY, req.Background = true, false
	if len(req.Argv) == 0 && req.Shell == "" {
		req.Argv = defaultShell
	}
	if !a.admitExec(w, r, &req) {
		return
	}
	sb, ok := backendAs[ShellBackend](a, w, r, "does not record shell sessions")
	if !ok {
		return
	}
	principal := ""
	if p := PrincipalOf(r.Context()); p != nil {
		principal = p.Name
	}
	a.relayTTY(w, r, func(ctx context.Context, stdin io.Reader, resize <-chan client.Resize, out io.Writer) (client.ExecResult, error) {
		return sb.Shell(ctx, r.PathValue("id"), principal, req, stdin, resize, out)
	})
}

// Shell runs a recorded terminal session through the agent.
func (a *Appliance) Shell(ctx context.Context, id, principal string, req client.ExecRequest, stdin io.Reader, resize <-chan client.Resize, stdout io.Writer) (client.ExecResult, error) {
	return a.execTerminal(ctx, id, req, stdin, resize, stdout, principal, true)
}
