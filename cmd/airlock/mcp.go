//go:build !airlock_thin

package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"airlock/internal/mcptools"
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

Either way the tools run as the socket's admin "local", and a refused
HTTP request is a warning on stderr, not an audit event (a client cannot
write the appliance's audit log). For several users, serve MCP from the
appliance itself: its control listener has the same tools at /v1/mcp,
each call run as the principal whose token carries it (scopes, quotas,
ownership and refusal events as for the REST API):

  {"type": "http", "url": "https://HOST:PORT/v1/mcp",
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
		s := mcptools.NewServer(mcptools.Fixed(apiClient()), version, log)
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
