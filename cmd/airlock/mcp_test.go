//go:build !airlock_thin

package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/audit"
	"airlock/client"
	"airlock/internal/mcptools"
	"airlock/serve"
)

// mcpBackend is the little of serve.Backend the tools below call; any
// other method panics (the embedded interface is nil).
type mcpBackend struct {
	serve.Backend
	events []audit.Event
}

func (b *mcpBackend) Get(_ context.Context, id string) (client.Sandbox, error) {
	if id != "sb-1" {
		return client.Sandbox{}, client.Errorf(client.CodeNotFound, "no sandbox %q", id)
	}
	return client.Sandbox{ID: id}, nil
}

func (b *mcpBackend) Exec(_ context.Context, id string, req client.ExecRequest, stdout, _ io.Writer) (client.ExecResult, error) {
	if id != "sb-1" {
		return client.ExecResult{}, client.Errorf(client.CodeNotFound, "no sandbox %q", id)
	}
	_, _ = io.WriteString(stdout, strings.Repeat("x", mcptools.MaxOutput+10))
	return client.ExecResult{ID: "ex-1", ExitCode: 2}, nil
}

func (b *mcpBackend) Logs(_ context.Context, _ client.LogQuery, fn func(audit.Event) error) error {
	for _, e := range b.events {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// startMCP serves the control API for b on a unix socket and connects an
// MCP client to the tools over in-memory transports.
func startMCP(t *testing.T, b serve.Backend) *mcp.ClientSession {
	t.Helper()
	sock := serveAPI(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, ct := mcp.NewInMemoryTransports()
	s := mcptools.NewServer(mcptools.Fixed(client.New(sock)), "test", slog.New(slog.DiscardHandler))
	if _, err := s.Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// serveAPI serves the control API for b on a unix socket until the test
// ends and returns the socket's path.
func serveAPI(t *testing.T, b serve.Backend) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: (&serve.API{Backend: b}).Handler()}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var out map[string]any
	if r.StructuredContent != nil {
		b, _ := json.Marshal(r.StructuredContent)
		_ = json.Unmarshal(b, &out)
	}
	return r, out
}

func TestMCPToolsHaveSchemas(t *testing.T) {
	cs := startMCP(t, &mcpBackend{})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"create_sandbox": nil, "run_command": {"sandbox_id", "command"},
		"read_file": {"sandbox_id", "path"}, "write_file": {"sandbox_id", "path", "content"},
		"list_files": {"sandbox_id"}, "destroy_sandbox": {"sandbox_id"}, "egress_log": {"sandbox_id"},
		"request_access": {"sandbox_id"}}
	for _, tool := range res.Tools {
		req, ok := want[tool.Name]
		if !ok {
			t.Errorf("unexpected tool %s", tool.Name)
			continue
		}
		delete(want, tool.Name)
		b, _ := json.Marshal(tool.InputSchema)
		var schema struct {
			Required   []string                                `json:"required"`
			Properties map[string]struct{ Description string } `json:"properties"`
		}
		_ = json.Unmarshal(b, &schema)
		if strings.Join(schema.Required, ",") != strings.Join(req, ",") {
			t.Errorf("%s: required %v, want %v", tool.Name, schema.Required, req)
		}
		for p, d := range schema.Properties {
			if d.Description == "" {
				t.Errorf("%s.%s has no description", tool.Name, p)
			}
		}
		if len(tool.Description) < 40 {
			t.Errorf("%s: description too short for an LLM: %q", tool.Name, tool.Description)
		}
	}
	for name := range want {
		t.Errorf("tool %s is missing", name)
	}
}

func TestMCPRunCommand(t *testing.T) {
	cs := startMCP(t, &mcpBackend{})
	r, out := callTool(t, cs, "run_command", map[string]any{"sandbox_id": "sb-1", "command": "yes x"})
	if r.IsError || out["exit_code"] != 2.0 || out["truncated"] != true || len(out["stdout"].(string)) != mcptools.MaxOutput {
		t.Errorf("run_command: error %v, exit %v, truncated %v", r.IsError, out["exit_code"], out["truncated"])
	}
	r, _ = callTool(t, cs, "run_command", map[string]any{"sandbox_id": "sb-nope", "command": "true"})
	if !r.IsError || !strings.Contains(r.Content[0].(*mcp.TextContent).Text, `no sandbox "sb-nope" (not_found)`) {
		t.Errorf("an unknown sandbox: %+v", r.Content)
	}
	r, _ = callTool(t, cs, "run_command", map[string]any{"sandbox_id": "sb-1", "command": " "})
	if !r.IsError {
		t.Error("an empty command is a tool error")
	}
}

func TestMCPEgressLogDenialsFirst(t *testing.T) {
	at := func(s int) time.Time { return time.Date(2026, 1, 1, 0, 0, s, 0, time.UTC) }
	b := &mcpBackend{events: []audit.Event{
		{Kind: "dns", Time: at(1), Verdict: "deny", Rule: "deny.hosts[0]", Reason: "denied host", DNS: &audit.DNS{QName: "bad.example.test.", QType: "A"}},
		{Kind: "http", Time: at(2), Verdict: "allow", Rule: "categories.docs.hosts[0]", HTTP: &audit.HTTP{Method: "GET", Scheme: "https", Host: "docs.example.test", Path: "/"}},
		{Kind: "flow", Time: at(3), Verdict: "allow", Flow: &audit.Flow{Stage: "close", Host: "docs.example.test"}},
		{Kind: "exec", Time: at(4), Verdict: ""},
		{Kind: "flow", Time: at(5), Verdict: "deny", Rule: "default", Reason: "no category covers this host", Flow: &audit.Flow{Stage: "decision", SNI: "evil.example.test"}},
	}}
	cs := startMCP(t, b)
	r, out := callTool(t, cs, "egress_log", map[string]any{"sandbox_id": "sb-1"})
	if r.IsError {
		t.Fatalf("egress_log: %+v", r.Content)
	}
	var got []string
	for _, d := range out["decisions"].([]any) {
		m := d.(map[string]any)
		got = append(got, m["verdict"].(string)+" "+m["destination"].(string)+" "+m["rule"].(string))
	}
	want := []string{"deny evil.example.test default", "deny bad.example.test. A deny.hosts[0]",
		"allow GET https://docs.example.test/ categories.docs.hosts[0]"}
	if strings.Join(got, "|") != strings.Join(want, "|") || out["denied"] != 2.0 {
		t.Errorf("decisions:\n got %q\nwant %q (denied %v)", got, want, out["denied"])
	}
	r, _ = callTool(t, cs, "egress_log", map[string]any{"sandbox_id": "sb-nope"})
	if !r.IsError {
		t.Error("egress_log of an unknown sandbox is a tool error")
	}
}

func TestMCPRequestAccessNeedsADestination(t *testing.T) {
	cs := startMCP(t, &mcpBackend{})
	r, _ := callTool(t, cs, "request_access", map[string]any{"sandbox_id": "sb-1"})
	if !r.IsError || !strings.Contains(r.Content[0].(*mcp.TextContent).Text, "give a destination") {
		t.Errorf("request_access without a destination: %+v", r.Content)
	}
}
