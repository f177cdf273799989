package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
)

var mcpCmd = &cobra.Command{
	Use:   "mcp",
	Short: "Serve sandboxes to an AI agent over MCP (Model Context Protocol), on stdio or streamable HTTP",
	Long: `Run an MCP server that gives an agent Airlock sandboxes:
create_sandbox, run_command, read_file, write_file, list_files,
destroy_sandbox, egress_log (recent egress decisions, denials first, with
the rule and reason) and request_access (ask a person for a destination;
they decide with airlock approve).

It talks to the appliance on its control socket (--socket or
AIRLOCK_SOCKET). By default it serves one client on stdin/stdout;
configure it in an MCP client as a stdio server:

  {"command": "airlock", "args": ["mcp"]}

With --http ADDR it serves MCP's streamable HTTP transport (protocol
2025-03-26 and later) at http://ADDR/mcp to any number of clients instead.
Every request must carry "Authorization: Bearer TOKEN" with the token in
--token-file (the appliance's control.token_file, say); others get 401 and
a warning on stderr. Off loopback it needs --tls-cert and --tls-key:

  airlock mcp --http 127.0.0.1:8765 --token-file /etc/airlock/token
  {"type": "http", "url": "http://127.0.0.1:8765/mcp",
   "headers": {"Authorization": "Bearer TOKEN"}}

Logs go to stderr.`,
	Example: `  airlock mcp
  airlock mcp --http 127.0.0.1:8765 --token-file /etc/airlock/token
  airlock mcp --http 0.0.0.0:8765 --token-file /etc/airlock/token --tls-cert mcp.crt --tls-key mcp.key`,
	Args: cobra.NoArgs,
	RunE: func(cmd *cobra.Command, _ []string) error {
		if o := mcpHTTPFlags; o.addr != "" {
			if err := o.check(); err != nil {
				return usagef("%w", err)
			}
		} else if o.tokenFile != "" || o.certFile != "" || o.keyFile != "" {
			return usagef("mcp: --token-file, --tls-cert and --tls-key go with --http")
		}
		ctx, cancel := signalContext()
		defer cancel()
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		s := newMCPServer(&mcpTools{c: apiClient()}, log)
		if mcpHTTPFlags.addr != "" {
			return serveMCPHTTP(ctx, s, mcpHTTPFlags, log, func(a net.Addr) {
				fmt.Fprintf(os.Stderr, "airlock mcp: streamable HTTP on %s://%s%s\n",
					map[bool]string{true: "https", false: "http"}[mcpHTTPFlags.certFile != ""], a, mcpPath)
			})
		}
		if err := s.Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
			return fmt.Errorf("mcp: %w", err)
		}
		return nil
	},
}

var mcpHTTPFlags mcpHTTP

func init() {
	f := mcpCmd.Flags()
	f.StringVar(&mcpHTTPFlags.addr, "http", "", "serve streamable HTTP on this host:port (at /mcp) instead of stdio, e.g. 127.0.0.1:8765")
	f.StringVar(&mcpHTTPFlags.tokenFile, "token-file", "", "with --http: the bearer token file every request must match (mode 0600, at least 16 characters)")
	f.StringVar(&mcpHTTPFlags.certFile, "tls-cert", "", "with --http: serve HTTPS with this certificate (PEM); required off loopback")
	f.StringVar(&mcpHTTPFlags.keyFile, "tls-key", "", "with --http: the certificate's private key (PEM)")
	rootCmd.AddCommand(mcpCmd)
}

// newMCPServer registers the sandbox tools on a new MCP server.
func newMCPServer(t *mcpTools, log *slog.Logger) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "airlock", Title: "Airlock sandboxes", Version: version},
		&mcp.ServerOptions{Logger: log, Instructions: mcpInstructions})
	mcp.AddTool(s, &mcp.Tool{Name: "create_sandbox", Description: descCreate}, t.create)
	mcp.AddTool(s, &mcp.Tool{Name: "run_command", Description: descRun}, t.run)
	mcp.AddTool(s, &mcp.Tool{Name: "read_file", Description: descRead}, t.readFile)
	mcp.AddTool(s, &mcp.Tool{Name: "write_file", Description: descWrite}, t.writeFile)
	mcp.AddTool(s, &mcp.Tool{Name: "list_files", Description: descList}, t.listFiles)
	mcp.AddTool(s, &mcp.Tool{Name: "destroy_sandbox", Description: descDestroy}, t.destroy)
	mcp.AddTool(s, &mcp.Tool{Name: "egress_log", Description: descEgress}, t.egressLog)
	mcp.AddTool(s, &mcp.Tool{Name: "request_access", Description: descAccess}, t.requestAccess)
	return s
}

const mcpInstructions = `Airlock runs your commands in isolated Linux sandboxes (Debian by default)
whose network access is decided by a policy: some destinations are allowed,
others are refused. Create a sandbox, run commands and edit files in it,
and destroy it when done. When a command fails to reach the network, call
egress_log: it names the policy rule that refused the connection and why.
If you need a refused destination for your task, call request_access with
a reason; a person decides.`

const (
	descCreate = `Create a new sandbox and return its sandbox_id (needed by every other tool). ` +
		`It is ready to run commands when this returns (a few seconds). The network is limited by the policy; ` +
		`files live under /workspace. Destroy it with destroy_sandbox when done.`
	descRun = `Run a shell command (/bin/sh -c) in a sandbox and return exit_code, stdout, stderr and exec_id. ` +
		`A non-zero exit_code is a normal result, not a tool error. The command is stopped after timeout_seconds ` +
		`(default 120); then timed_out is true. Output beyond 64 KiB per stream is cut (truncated: true).`
	descRead    = `Read a text file from a sandbox (UTF-8, at most 1 MiB returned). Paths are inside the sandbox, e.g. /workspace/main.py.`
	descWrite   = `Write (create or replace) a text file in a sandbox with the given content. Missing parent directories are created.`
	descList    = `List a directory of a sandbox (default /workspace): each entry's name, type (file, dir, symlink) and size in bytes.`
	descDestroy = `Destroy a sandbox and everything in it. Its egress log stays on the appliance.`
	descEgress  = `Show a sandbox's recent network decisions, refusals first: for each, the destination, the kind (dns, flow, http), ` +
		`the verdict (deny, allow, ask, audit), the policy rule that decided and the reason. Use it to understand why a ` +
		`command could not reach something.`
	descAccess = `Ask a person to grant a sandbox access to a destination (a host, host:port or URL) the policy refuses or asks about. ` +
		`Give a short reason. Returns approval_id and status: pending, granted or denied. A person decides with ` +
		"`airlock approve`; call again with the approval_id (and optionally wait_seconds) to see the decision. " +
		`Do not retry the refused request until the status is granted.`
)
