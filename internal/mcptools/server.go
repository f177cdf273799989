package mcptools

import (
	"log/slog"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// NewServer registers the sandbox tools on a new MCP server; version is
// the one it reports to clients.
func NewServer(t *Tools, version string, log *slog.Logger) *mcp.Server {
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
