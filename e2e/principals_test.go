package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/audit"
	"airlock/client"
	"airlock/serve"
)

// principalSpec is one principal of the appliance's principals file.
type principalSpec struct {
	name      string
	scopes    []string
	sandboxes int // quota.sandboxes; 0: none
}

// principalsFile writes specs as the appliance's principals file, each
// with a new token (in a.tokens).
func principalsFile(specs []principalSpec) func(*sdkAppliance) (string, error) {
	return func(a *sdkAppliance) (string, error) {
		a.tokens = map[string]string{}
		var b strings.Builder
		b.WriteString("version = 1\n")
		for _, p := range specs {
			tok, hash := serve.NewToken()
			a.tokens[p.name] = tok
			fmt.Fprintf(&b, "\n[principals.%s]\ntoken_sha256 = %q\nscopes = [\"%s\"]\n", p.name, hash, strings.Join(p.scopes, `", "`))
			if p.sandboxes > 0 {
				fmt.Fprintf(&b, "[principals.%s.quota]\nsandboxes = %d\n", p.name, p.sandboxes)
			}
		}
		path := filepath.Join(a.dir, "principals.toml")
		return path, os.WriteFile(path, []byte(b.String()), 0o600)
	}
}

func (a *sdkAppliance) url() string { return "https://127.0.0.1:" + strconv.Itoa(int(a.ports.control)) }

// as is a client of the TLS listener with name's token.
func (a *sdkAppliance) as(t *testing.T, name string) *client.Client {
	t.Helper()
	c, err := client.NewRemote(a.url(), a.tokens[name], client.TLSOptions{CAFile: a.caFile()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const (
	tenN     = 10 // principals
	tenQuota = 5  // sandboxes each
)

// TestPrincipalsOnAppliance: one real appliance (Podman busybox
// sandboxes, the TLS listener) with principals: ten of quota 5, and two
// that drive the MCP endpoint on the listener.
func TestPrincipalsOnAppliance(t *testing.T) {
	requireAppliance(t)
	all := []string{serve.ScopeCreate, serve.ScopeExec, serve.ScopeFiles, serve.ScopeLogs}
	specs := []principalSpec{
		{name: "mcpa", scopes: all, sandboxes: 1},
		{name: "mcpb", scopes: []string{serve.ScopeCreate, serve.ScopeFiles, serve.ScopeLogs}},
	}
	for i := range tenN {
		specs = append(specs, principalSpec{name: fmt.Sprintf("p%d", i), scopes: all, sandboxes: tenQuota})
	}
	a := startApplianceWith(t, startWorld(t), "prn", func(cfg string) string {
		return strings.Replace(cfg, "\nmax = 8\n", "\nmax = 64\n", 1)
	}, principalsFile(specs))
	t.Run("mcp", func(t *testing.T) { testMCPOnListener(t, a) })
	t.Run("mcp-ts", func(t *testing.T) { testMCPListenerTS(t, a) })
	t.Run("ten-by-five", func(t *testing.T) { testTenByFive(t, a) })
}

// testMCPListenerTS runs sdk/mcp-test/mcp-listener.test.mjs: the official
// TypeScript MCP client on /v1/mcp as mcpa and mcpb.
func testMCPListenerTS(t *testing.T, a *sdkAppliance) {
	dir := filepath.Join(repoRoot(), "sdk", "mcp-test")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("the MCP test client is not installed: run `make sdk-deps` (npm ci in sdk/mcp-test; make test does): %v", err)
	}
	env := append(os.Environ(), "AIRLOCK_MCP_URL="+a.url()+client.APIVersion+"/mcp", "AIRLOCK_MCP_IMAGE="+serve.DefaultImage,
		"AIRLOCK_MCP_TOKEN_A="+a.tokens["mcpa"], "AIRLOCK_MCP_TOKEN_B="+a.tokens["mcpb"], "NODE_EXTRA_CA_CERTS="+a.caFile())
	run(t, dir, env, "node", "--test", "mcp-listener.test.mjs")
}

// testTenByFive: ten principals each fire six creates at once with a
// quota of five: exactly five each succeed and one gets 429. Each then
// sees, runs in and reads only its own; the admin sees all fifty.
func testTenByFive(t *testing.T, a *sdkAppliance) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	owned, over := map[string][]string{}, map[string]int{}
	var mu sync.Mutex
	t.Cleanup(func() { removeAll(t, a, owned) })
	var wg sync.WaitGroup
	sem := make(chan struct{}, 10) // creates in flight on the host
	start := time.Now()
	for i := range tenN {
		name := fmt.Sprintf("p%d", i)
		c := a.as(t, name)
		for range tenQuota + 1 {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				sb, err := c.Create(ctx, client.CreateRequest{Image: serve.DefaultImage})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case client.IsCode(err, client.CodeQuotaExceeded):
					over[name]++
				case err != nil:
					t.Errorf("%s create: %v", name, err)
				default:
					owned[name] = append(owned[name], sb.ID)
				}
			})
		}
	}
	wg.Wait()
	t.Logf("%d creates by %d principals in %v", tenN*(tenQuota+1), tenN, time.Since(start).Round(time.Millisecond))
	for i := range tenN {
		name := fmt.Sprintf("p%d", i)
		if len(owned[name]) != tenQuota || over[name] != 1 {
			t.Errorf("%s: %d sandboxes and %d 429s, want %d and 1", name, len(owned[name]), over[name], tenQuota)
		}
	}
	if t.Failed() {
		return
	}
	for i := range tenN {
		name, other := fmt.Sprintf("p%d", i), fmt.Sprintf("p%d", (i+1)%tenN)
		checkOwnSandboxes(ctx, t, a.as(t, name), name, owned[name], owned[other][0])
	}
	admin, err := a.c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(admin))
	for _, sb := range admin {
		ids = append(ids, sb.ID)
	}
	for name, mine := range owned {
		for _, id := range mine {
			if !slices.Contains(ids, id) {
				t.Errorf("the admin does not see %s's %s", name, id)
			}
		}
	}
	waitRefusal(t, a, "p0", "POST /v1/sandboxes", "quota.sandboxes", 429)
	waitRefusal(t, a, "p0", "POST /v1/sandboxes/"+owned["p1"][0]+"/exec", "another principal", 404)
	for name, mine := range owned {
		c := a.as(t, name)
		for _, id := range mine {
			if err := c.Delete(ctx, id); err != nil {
				t.Errorf("%s removes its %s: %v", name, id, err)
			}
		}
	}
	left, _ := a.c.List(ctx)
	for _, sb := range left {
		if o := ownerOf(owned, sb.ID); o != "" {
			t.Errorf("%s's sandbox %s is left after its removal", o, sb.ID)
		}
	}
}

// checkOwnSandboxes: c (principal name) lists exactly mine, runs a
// command and reads a file in its own, and gets not_found for another's.
func checkOwnSandboxes(ctx context.Context, t *testing.T, c *client.Client, name string, mine []string, other string) {
	t.Helper()
	list, err := c.List(ctx)
	if err != nil {
		t.Fatalf("%s list: %v", name, err)
	}
	var got []string
	for _, sb := range list {
		got = append(got, sb.ID)
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(mine))
	if !slices.Equal(got, want) {
		t.Errorf("%s lists %v, want its own %v", name, got, want)
	}
	var out strings.Builder
	if res, err := c.Exec(ctx, mine[0], client.ExecRequest{Shell: "echo " + name + " > /tmp/who; cat /tmp/who"}, &out, io.Discard); err != nil || res.ExitCode != 0 || strings.TrimSpace(out.String()) != name {
		t.Errorf("%s exec in its own sandbox: %q, %+v, %v", name, out.String(), res, err)
	}
	var f strings.Builder
	if _, err := c.ReadFile(ctx, mine[0], "/tmp/who", &f); err != nil || strings.TrimSpace(f.String()) != name {
		t.Errorf("%s reads its own /tmp/who: %q, %v", name, f.String(), err)
	}
	for what, call := range map[string]func() error{
		"get": func() error { _, err := c.Get(ctx, other); return err },
		"exec": func() error {
			_, err := c.Exec(ctx, other, client.ExecRequest{Shell: "true"}, io.Discard, io.Discard)
			return err
		},
		"read file": func() error { _, err := c.ReadFile(ctx, other, "/etc/hostname", io.Discard); return err },
		"events": func() error {
			return c.Logs(ctx, client.LogQuery{Sandbox: other}, func(audit.Event) error { return nil })
		},
		"delete": func() error { return c.Delete(ctx, other) },
	} {
		if err := call(); !client.IsCode(err, client.CodeNotFound) {
			t.Errorf("%s %s on another's sandbox %s: %v, want not_found", name, what, other, err)
		}
	}
}

func ownerOf(owned map[string][]string, id string) string {
	for name, ids := range owned {
		if slices.Contains(ids, id) {
			return name
		}
	}
	return ""
}

// removeAll removes, through the socket, whatever the test left.
func removeAll(t *testing.T, a *sdkAppliance, owned map[string][]string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, ids := range owned {
		for _, id := range ids {
			if err := a.c.Delete(ctx, id); err != nil && !client.IsCode(err, client.CodeNotFound) {
				t.Errorf("cleanup: remove %s: %v", id, err)
			}
		}
	}
}

// waitRefusal waits for a refusal event of principal for action whose
// reason has reason (events reach the store a moment after the answer).
func waitRefusal(t *testing.T, a *sdkAppliance, principal, action, reason string, status int) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		found := false
		err := a.c.Logs(ctx, client.LogQuery{Kind: audit.KindRefusal}, func(e audit.Event) error {
			r := e.Refusal
			if r != nil && r.Principal == principal && r.Action == action && r.Status == status && strings.Contains(e.Reason, reason) {
				found = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if found {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("no refusal event: principal %q, %s, %d, reason %q", principal, action, status, reason)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// mcpSession connects the go-sdk's streamable HTTP client to the
// listener's /v1/mcp over TLS (verified by the appliance CA) as name.
func mcpSession(t *testing.T, a *sdkAppliance, name string) *mcp.ClientSession {
	t.Helper()
	pem, err := os.ReadFile(a.caFile())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Transport: tokenTransport{token: a.tokens[name],
		rt: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := &mcp.StreamableClientTransport{Endpoint: a.url() + client.APIVersion + "/mcp", HTTPClient: hc, MaxRetries: -1}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("%s connects to /v1/mcp: %v", name, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

type tokenTransport struct {
	token string
	rt    http.RoundTripper
}

func (b tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// callMCP calls a tool: its structured result, or its tool error's text.
func callMCP(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (map[string]any, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
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

// testMCPOnListener: the MCP tools on the appliance's TLS listener run as
// the principal of the token: its sandboxes only, its scopes, its quota
// (429 as a tool error), and each refusal an audit event.
func testMCPOnListener(t *testing.T, a *sdkAppliance) {
	ca, cb := mcpSession(t, a, "mcpa"), mcpSession(t, a, "mcpb")
	img := map[string]any{"image": serve.DefaultImage}
	out, msg := callMCP(t, ca, "create_sandbox", img)
	if msg != "" {
		t.Fatalf("mcpa create_sandbox: %s", msg)
	}
	aid := out["sandbox_id"].(string)
	t.Cleanup(func() { _ = a.c.Delete(context.Background(), aid) })
	if out, msg = callMCP(t, ca, "run_command", map[string]any{"sandbox_id": aid, "command": "echo hi from $(hostname) >&1"}); msg != "" ||
		!strings.HasPrefix(out["stdout"].(string), "hi from") || out["exit_code"] != 0.0 {
		t.Errorf("mcpa run_command: %v %s", out, msg)
	}
	if _, msg = callMCP(t, ca, "write_file", map[string]any{"sandbox_id": aid, "path": "/tmp/a/note", "content": "mine"}); msg != "" {
		t.Errorf("mcpa write_file: %s", msg)
	}
	if out, msg = callMCP(t, ca, "read_file", map[string]any{"sandbox_id": aid, "path": "/tmp/a/note"}); msg != "" || out["content"] != "mine" {
		t.Errorf("mcpa read_file: %v %s", out, msg)
	}
	if _, msg = callMCP(t, ca, "create_sandbox", img); !strings.Contains(msg, "quota_exceeded") {
		t.Errorf("mcpa's second create_sandbox (quota 1): %q, want a quota_exceeded tool error", msg)
	}
	waitRefusal(t, a, "mcpa", "POST /v1/sandboxes", "quota.sandboxes", 429)

	out, msg = callMCP(t, cb, "create_sandbox", img)
	if msg != "" {
		t.Fatalf("mcpb create_sandbox: %s", msg)
	}
	bid := out["sandbox_id"].(string)
	t.Cleanup(func() { _ = a.c.Delete(context.Background(), bid) })
	if _, msg = callMCP(t, cb, "run_command", map[string]any{"sandbox_id": bid, "command": "id"}); !strings.Contains(msg, `lacks the scope "sandbox:exec"`) {
		t.Errorf("mcpb run_command without sandbox:exec: %q, want a scope refusal", msg)
	}
	waitRefusal(t, a, "mcpb", "POST /v1/sandboxes/"+bid+"/exec", "missing scope sandbox:exec", 403)
	if _, msg = callMCP(t, cb, "list_files", map[string]any{"sandbox_id": bid, "path": "/"}); msg != "" {
		t.Errorf("mcpb list_files in its own: %s", msg)
	}
	for name, args := range map[string]map[string]any{
		"read_file":       {"sandbox_id": aid, "path": "/tmp/a/note"},
		"egress_log":      {"sandbox_id": aid},
		"destroy_sandbox": {"sandbox_id": aid},
	} {
		if _, msg = callMCP(t, cb, name, args); !strings.Contains(msg, "no sandbox") {
			t.Errorf("mcpb %s on mcpa's sandbox: %q, want not found", name, msg)
		}
	}
	waitRefusal(t, a, "mcpb", "DELETE /v1/sandboxes/"+aid, "another principal", 404)
	if _, err := a.c.Get(context.Background(), aid); err != nil {
		t.Errorf("mcpa's sandbox after mcpb's destroy_sandbox: %v", err)
	}
	for cs, id := range map[*mcp.ClientSession]string{ca: aid, cb: bid} {
		if _, msg = callMCP(t, cs, "destroy_sandbox", map[string]any{"sandbox_id": id}); msg != "" {
			t.Errorf("destroy_sandbox %s by its owner: %s", id, msg)
		}
	}
}
