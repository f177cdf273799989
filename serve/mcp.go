package serve

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/client"
	"airlock/internal/mcptools"
)

// mcpRoutes serves the MCP tools (mcptools) at /v1/mcp over MCP's
// streamable HTTP transport. The route itself needs only an
// authenticated caller; each tool call is an in-process request of this
// API's own routes with the caller's token, so scopes, quotas, ownership
// and refusal events are exactly the REST API's.
func (a *API) mcpRoutes(mux *http.ServeMux, v string) {
	h := &mcpEndpoint{api: a, inner: a.wrap(mux)}
	mux.Handle("POST "+v+"/mcp", h)
	mux.Handle("GET "+v+"/mcp", h)
	mux.Handle("DELETE "+v+"/mcp", h)
}

// mcpEndpoint is /v1/mcp; its MCP server is made on first use.
type mcpEndpoint struct {
	api   *API
	inner http.Handler // the API's routes behind authorize (wrap)
	once  sync.Once
	h     http.Handler
}

// mcpCaller is who sent an MCP request: what its tool calls are sent as.
type mcpCaller struct{ auth, remote, peer string }

const mcpCallerKey = "airlock.caller"

func (e *mcpEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.once.Do(e.build)
	p := PrincipalOf(r.Context())
	if p == nil {
		e.api.fail(w, r, client.Errorf(client.CodeUnauthorized, "mcp: no authenticated caller"))
		return
	}
	// The token was checked by authorize; the TokenInfo binds the MCP
	// session to the principal (the SDK refuses it to any other) and
	// carries the caller to the tool calls.
	ti := &auth.TokenInfo{UserID: p.Name, Scopes: p.Scopes,
		Extra: map[string]any{mcpCallerKey: mcpCaller{auth: r.Header.Get("Authorization"), remote: r.RemoteAddr, peer: Peer(r.Context())}}}
	verify := func(context.Context, string, *http.Request) (*auth.TokenInfo, error) { return ti, nil }
	r2 := r
	if r.Header.Get("Authorization") == "" { // the unix socket: no token, the local admin
		r2 = r.Clone(r.Context())
		r2.Header.Set("Authorization", "Bearer local")
	}
	sw := &sessionRefusals{ResponseWriter: w}
	auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(e.h).ServeHTTP(sw, r2)
	if sw.status == http.StatusForbidden && r.Header.Get("Mcp-Session-Id") != "" {
		e.api.log().Warn("api: refused", "request_id", RequestID(r.Context()), "principal", p.Name, "method", r.Method,
			"path", r.URL.Path, "status", sw.status, "reason", "mcp session of another principal")
		e.api.emitRefusal(r, p.Name, &refusal{err: client.Errorf(client.CodeForbidden, "mcp session of another principal"),
			reason: "mcp session of another principal"})
	}
}

func (e *mcpEndpoint) build() {
	a := e.api
	tools := &mcptools.Tools{For: e.clientFor}
	srv := mcptools.NewServer(tools, a.Backend.Health(context.Background()).Version, a.log().With("component", "mcp"))
	e.h = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Logger: a.log().With("component", "mcp"), SessionTimeout: 30 * time.Minute})
}

// clientFor is the client a tool call runs through: this API, in process,
// as the caller of the HTTP request that carried the call.
func (e *mcpEndpoint) clientFor(_ context.Context, req *mcp.CallToolRequest) (*client.Client, error) {
	var c mcpCaller
	ok := false
	if req != nil && req.Extra != nil && req.Extra.TokenInfo != nil {
		c, ok = req.Extra.TokenInfo.Extra[mcpCallerKey].(mcpCaller)
	}
	if !ok {
		return nil, errors.New("mcp: the tool call carries no caller (refused)")
	}
	return client.NewTransport("http://airlock", inprocTransport{h: e.inner, auth: c.auth, remote: c.remote,
		peer: c.peer, log: e.api.log()}), nil
}

// sessionRefusals notes the status the MCP handler answers.
type sessionRefusals struct {
	http.ResponseWriter
	status int
}

func (w *sessionRefusals) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *sessionRefusals) Unwrap() http.ResponseWriter { return w.ResponseWriter }
