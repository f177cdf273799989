//go:build !airlock_thin

package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/client"
	"airlock/internal/mcptools"
)

const testMCPToken = "mcp-test-token-0123456789"

// startMCPHTTP serves the tools for the fake backend over streamable HTTP
// on loopback, as `airlock mcp --http` does, and returns the endpoint and
// the server's log.
func startMCPHTTP(t *testing.T) (endpoint string, log *syncBuffer) {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(testMCPToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log = &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s := mcptools.NewServer(mcptools.Fixed(client.New(serveAPI(t, &mcpBackend{}))), "test", logger)
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- serveMCPHTTP(ctx, s, mcpHTTP{addr: "127.0.0.1:0", tokenFile: tokenFile}, logger, func(a net.Addr) { addr <- a })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serveMCPHTTP: %v", err)
		}
	})
	select {
	case a := <-addr:
		return "http://" + a.String() + mcpPath, log
	case err := <-done:
		t.Fatalf("serveMCPHTTP: %v", err)
	}
	return "", nil
}

// bearer adds an Authorization header to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func connectHTTP(t *testing.T, endpoint, token string) (*mcp.ClientSession, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := &http.Client{Transport: bearer{token}}
	tr := &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1}
	return mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, tr, nil)
}

// TestMCPOverStreamableHTTP drives the tools with the go-sdk's streamable
// HTTP client, as an agent framework would, with the right token.
func TestMCPOverStreamableHTTP(t *testing.T) {
	endpoint, _ := startMCPHTTP(t)
	cs, err := connectHTTP(t, endpoint, testMCPToken)
	if err != nil {
		t.Fatalf("connect with the token: %v", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != 8 {
		t.Fatalf("list tools: %v, %d tools", err, len(tools.Tools))
	}
	r, out := callTool(t, cs, "run_command", map[string]any{"sandbox_id": "sb-1", "command": "yes x"})
	if r.IsError || out["exit_code"] != 2.0 || out["exec_id"] != "ex-1" {
		t.Errorf("run_command over HTTP: error %v, %v", r.IsError, out)
	}
	r, _ = callTool(t, cs, "run_command", map[string]any{"sandbox_id": "sb-nope", "command": "true"})
	if !r.IsError || !strings.Contains(r.Content[0].(*mcp.TextContent).Text, "not_found") {
		t.Errorf("an unknown sandbox over HTTP: %+v", r.Content)
	}
}

// TestMCPHTTPRefusesWithoutTheToken: no token, a wrong one, or the right
// one with a different length, and the endpoint answers 401 and logs why,
// never the token; a client cannot even initialize.
func TestMCPHTTPRefusesWithoutTheToken(t *testing.T) {
	endpoint, log := startMCPHTTP(t)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for name, c := range map[string]struct{ header, reason string }{
		"no header":       {"", "no bearer token"},
		"empty":           {"Bearer ", "no bearer token"},
		"basic":           {"Basic " + testMCPToken, "no bearer token"},
		"wrong token":     {"Bearer mcp-test-token-0123456780", "wrong bearer token"},
		"a prefix of it":  {"Bearer " + testMCPToken[:20], "wrong bearer token"},
		"it and more":     {"Bearer " + testMCPToken + "x", "wrong bearer token"},
		"another scheme?": {"bearer " + testMCPToken, "no bearer token"},
	} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", endpoint, strings.NewReader(init))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if c.header != "" {
				req.Header.Set("Authorization", c.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("status %d, WWW-Authenticate %q; want 401 Bearer", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
			}
			if !strings.Contains(log.String(), "reason=\""+c.reason+"\"") {
				t.Errorf("the refusal is not logged with reason %q:\n%s", c.reason, log)
			}
		})
	}
	if _, err := connectHTTP(t, endpoint, "not-the-token-at-all"); err == nil {
		t.Error("a client with a wrong token connected")
	}
	if strings.Contains(log.String(), testMCPToken[:16]) {
		t.Errorf("the log holds the token:\n%s", log)
	}
}

func TestMCPHTTPOptions(t *testing.T) {
	short := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(short, []byte("tooshort\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	loose := filepath.Join(t.TempDir(), "loose")
	if err := os.WriteFile(loose, []byte(testMCPToken), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		o    mcpHTTP
		want string
	}{
		"no token file":           {mcpHTTP{addr: "127.0.0.1:0"}, "give --token-file"},
		"a short token":           {mcpHTTP{addr: "127.0.0.1:0", tokenFile: short}, "too short"},
		"a token others can read": {mcpHTTP{addr: "127.0.0.1:0", tokenFile: loose}, "control token"},
		"off loopback in clear":   {mcpHTTP{addr: "0.0.0.0:8765", tokenFile: short}, "not a loopback address"},
		"every address in clear":  {mcpHTTP{addr: ":8765", tokenFile: short}, "not a loopback address"},
		"a key without a cert":    {mcpHTTP{addr: "127.0.0.1:0", tokenFile: short, keyFile: "k"}, "both --tls-cert and --tls-key"},
		"no port":                 {mcpHTTP{addr: "127.0.0.1", tokenFile: short}, "want host:port"},
	} {
		t.Run(name, func(t *testing.T) {
			err := serveMCPHTTP(context.Background(), nil, c.o, slog.New(slog.DiscardHandler), nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
