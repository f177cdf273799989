package serve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/client"
)

// mcpFake runs shell commands (the MCP tool sends a command line).
type mcpFake struct{ reportFake }

func (f mcpFake) Exec(_ context.Context, id string, req client.ExecRequest, stdout, _ io.Writer) (client.ExecResult, error) {
	if _, err := f.lookup(id); err != nil {
		return client.ExecResult{}, err
	}
	f.record("exec %s %s", id, req.Shell)
	fmt.Fprintf(stdout, "ran %s", req.Shell)
	return client.ExecResult{ID: "ex-1"}, nil
}

// startMCPPrincipals is the TLS listener of startPrincipals with alice
// (every scope but admin, one sandbox at a time) and bob (create and
// files, no exec).
func startMCPPrincipals(t *testing.T) *principalWorld {
	t.Helper()
	toks := map[string]string{"alice": "alice-token-0123456789abcdef", "bob": "bob-token-0123456789abcdefgh"}
	body := principalEntry("alice", toks["alice"], allScopes(), "[principals.alice.quota]\nsandboxes = 1\n") +
		principalEntry("bob", toks["bob"], []string{ScopeCreate, ScopeFiles}, "")
	w := startPrincipals(t, body, toks)
	w.api.Backend = mcpFake{reportFake{w.fb}}
	return w
}

// mcpHTTPClient is an HTTP client that trusts the world's CA and sends
// token as the bearer.
func (w *principalWorld) mcpHTTPClient(token string) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.ca.CertPEM())
	return &http.Client{Transport: bearerTransport{token: token,
		rt: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
}

type bearerTransport struct {
	token string
	rt    http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// mcpConnect connects the go-sdk's streamable HTTP client to /v1/mcp.
func mcpConnect(t *testing.T, base string, hc *http.Client) (*mcp.ClientSession, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr := &mcp.StreamableClientTransport{Endpoint: base + client.APIVersion + "/mcp", HTTPClient: hc, MaxRetries: -1}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func (w *principalWorld) mcpAs(name string) *mcp.ClientSession {
	w.t.Helper()
	cs, err := mcpConnect(w.t, w.base, w.mcpHTTPClient(w.tokens[name]))
	if err != nil {
		w.t.Fatalf("%s connects to /v1/mcp: %v", name, err)
	}
	return cs
}

// tool calls a tool and returns its structured result, or the text of
// its tool error.
func tool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (map[string]any, string) {
	t.Helper()
	r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if r.IsError {
		var b strings.Builder
		for _, c := range r.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return nil, b.String()
	}
	var out map[string]any
	raw, _ := json.Marshal(r.StructuredContent)
	_ = json.Unmarshal(raw, &out)
	return out, ""
}

// TestMCPOnListenerRunsAsPrincipal: the tools on the TLS listener run as
// the caller's principal: its scopes, quota and ownership are the REST
// API's, and every refusal is the same refusal event.
func TestMCPOnListenerRunsAsPrincipal(t *testing.T) {
	w := startMCPPrincipals(t)
	alice, bob := w.mcpAs("alice"), w.mcpAs("bob")
	tools, err := alice.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != 8 {
		t.Fatalf("alice lists %d tools (%v), want 8", len(tools.Tools), err)
	}

	out, msg := tool(t, alice, "create_sandbox", nil)
	if msg != "" {
		t.Fatalf("alice create_sandbox: %s", msg)
	}
	mine := out["sandbox_id"].(string)
	if o, ok := w.api.owners().Owner(mine); !ok || o != "alice" {
		t.Errorf("the sandbox made over MCP is owned by %q, want alice", o)
	}
	if out, msg = tool(t, alice, "run_command", map[string]any{"sandbox_id": mine, "command": "echo hi"}); msg != "" || out["stdout"] != "ran echo hi" {
		t.Errorf("alice run_command: %v %s", out, msg)
	}
	// Her quota is one sandbox: the 429 is a tool error with its reason.
	if _, msg = tool(t, alice, "create_sandbox", nil); !strings.Contains(msg, "quota_exceeded") || !strings.Contains(msg, "quota") {
		t.Errorf("alice's second create_sandbox: %q, want a quota_exceeded tool error", msg)
	}
	w.wantRefusal("alice", "POST /v1/sandboxes", "quota.sandboxes", 429)

	// Bob may create but not exec: a scope refusal, even in his own.
	out, msg = tool(t, bob, "create_sandbox", nil)
	if msg != "" {
		t.Fatalf("bob create_sandbox: %s", msg)
	}
	his := out["sandbox_id"].(string)
	if _, msg = tool(t, bob, "run_command", map[string]any{"sandbox_id": his, "command": "id"}); !strings.Contains(msg, `lacks the scope "sandbox:exec"`) {
		t.Errorf("bob run_command: %q, want a scope refusal", msg)
	}
	w.wantRefusal("bob", "POST /v1/sandboxes/"+his+"/exec", "missing scope sandbox:exec", 403)

	// Alice's sandbox does not exist for bob.
	for name, args := range map[string]map[string]any{
		"read_file":       {"sandbox_id": mine, "path": "/etc/passwd"},
		"list_files":      {"sandbox_id": mine},
		"destroy_sandbox": {"sandbox_id": mine},
	} {
		if _, msg = tool(t, bob, name, args); !strings.Contains(msg, "no sandbox") {
			t.Errorf("bob %s on alice's sandbox: %q, want not found", name, msg)
		}
	}
	w.wantRefusal("bob", "DELETE /v1/sandboxes/"+mine, "another principal", 404)
	if _, err := w.fb.lookup(mine); err != nil {
		t.Errorf("alice's sandbox is gone after bob's destroy_sandbox: %v", err)
	}
	if strings.Contains(w.logBuf.String(), w.tokens["alice"]) || strings.Contains(w.logBuf.String(), w.tokens["bob"]) {
		t.Error("a token is in the log")
	}
}

// TestMCPOnListenerRefusesStrangers: a bad token gets no session, another
// principal's session id is refused, and a revoked token ends a session
// at its next call; each is a refusal event.
func TestMCPOnListenerRefusesStrangers(t *testing.T) {
	w := startMCPPrincipals(t)
	if _, err := mcpConnect(t, w.base, w.mcpHTTPClient("wrong-token-0123456789abcdef")); err == nil {
		t.Error("a wrong token connected to /v1/mcp")
	}
	w.wantRefusal("", "POST /v1/mcp", "unknown or revoked token", 401)

	alice := w.mcpAs("alice")
	status := w.mcpPost(w.tokens["bob"], alice.ID())
	if status != http.StatusForbidden {
		t.Errorf("bob on alice's MCP session: %d, want 403", status)
	}
	w.wantRefusal("bob", "POST /v1/mcp", "mcp session of another principal", 403)
	if status = w.mcpPost(w.tokens["alice"], alice.ID()); status != http.StatusOK {
		t.Errorf("alice on her own session: %d, want 200", status)
	}

	w.write(principalEntry("bob", w.tokens["bob"], []string{ScopeCreate}, ""))
	if err := w.store.Reload("test"); err != nil {
		t.Fatal(err)
	}
	_, err := alice.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_sandbox"})
	if err == nil {
		t.Error("alice's session still works after her token was revoked")
	}
	w.wantRefusal("", "POST /v1/mcp", "unknown or revoked token", 401)
}

// mcpPost sends tools/list on session id with token and returns the
// status.
func (w *principalWorld) mcpPost(token, session string) int {
	w.t.Helper()
	req, _ := http.NewRequest("POST", w.base+client.APIVersion+"/mcp",
		strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	resp, err := w.mcpHTTPClient(token).Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestMCPOnUnixSocketIsLocal: without tokens (the unix socket's API) the
// tools run as the local admin.
func TestMCPOnUnixSocketIsLocal(t *testing.T) {
	fb := newFake()
	api := &API{Backend: mcpFake{reportFake{fb}}}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	cs, err := mcpConnect(t, srv.URL, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	out, msg := tool(t, cs, "create_sandbox", nil)
	if msg != "" {
		t.Fatalf("create_sandbox: %s", msg)
	}
	if o, _ := api.owners().Owner(out["sandbox_id"].(string)); o != LocalPrincipal {
		t.Errorf("owner %q, want %q", o, LocalPrincipal)
	}
	if out, msg = tool(t, cs, "run_command", map[string]any{"sandbox_id": out["sandbox_id"], "command": "true"}); msg != "" || out["stdout"] != "ran true" {
		t.Errorf("run_command: %v %s", out, msg)
	}
}
