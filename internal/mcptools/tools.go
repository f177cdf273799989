// Package mcptools is Airlock's MCP (Model Context Protocol) server: the
// sandbox tools an agent calls, each one a call of the control API made
// through the client the caller chooses. `airlock mcp` (stdio, or its own
// HTTP listener) drives the API over the unix socket; the appliance's
// control listener serves the same tools at /v1/mcp, each call running
// as the principal whose bearer token carried it.
package mcptools

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/client"
)

// Tools are the MCP tools. Each call asks For for the control API client
// it runs through.
type Tools struct {
	// For returns the client of the call req (carried by ctx).
	For func(ctx context.Context, req *mcp.CallToolRequest) (*client.Client, error)
}

// Fixed runs every tool call through c.
func Fixed(c *client.Client) *Tools {
	return &Tools{For: func(context.Context, *mcp.CallToolRequest) (*client.Client, error) { return c, nil }}
}

const (
	// MaxOutput is how much of each output stream run_command returns.
	MaxOutput = 64 << 10
	maxRead   = 1 << 20
)

type createIn struct {
	Image          string            `json:"image,omitempty" jsonschema:"container image; empty for the appliance's default (Debian with common tools)"`
	Policy         string            `json:"policy,omitempty" jsonschema:"egress policy name; empty for the appliance's default"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables for every command"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"default time limit of each command in seconds"`
	Lockfiles      []lockfileIn      `json:"lockfiles,omitempty" jsonschema:"lockfiles restricting package installs to the versions they list, with their digests"`
}

type lockfileIn struct {
	Name    string `json:"name" jsonschema:"the lockfile's name: package-lock.json, npm-shrinkwrap.json, requirements*.txt (with --hash), uv.lock or poetry.lock"`
	Content string `json:"content" jsonschema:"the lockfile's text"`
}

type createOut struct {
	SandboxID string   `json:"sandbox_id"`
	Image     string   `json:"image"`
	Policy    string   `json:"policy"`
	Warnings  []string `json:"warnings,omitempty"`
}

func (t *Tools) create(ctx context.Context, req *mcp.CallToolRequest, in createIn) (*mcp.CallToolResult, createOut, error) {
	c, err := t.For(ctx, req)
	if err != nil {
		return nil, createOut{}, err
	}
	cr := client.CreateRequest{Image: in.Image, Policy: in.Policy, Env: in.Env,
		ExecTimeout: client.Duration(time.Duration(in.TimeoutSeconds) * time.Second), Labels: map[string]string{"created-by": "mcp"}}
	for _, f := range in.Lockfiles {
		cr.Lockfiles = append(cr.Lockfiles, client.Lockfile(f))
	}
	sb, err := c.Create(ctx, cr)
	if err != nil {
		return nil, createOut{}, fmt.Errorf("create_sandbox: %w", err)
	}
	return nil, createOut{SandboxID: sb.ID, Image: sb.Image, Policy: sb.Policy, Warnings: sb.Warnings}, nil
}

type runIn struct {
	SandboxID      string            `json:"sandbox_id" jsonschema:"the sandbox, from create_sandbox"`
	Command        string            `json:"command" jsonschema:"a shell command line, run with /bin/sh -c"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory (default /workspace)"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"extra environment variables"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"stop the command after this many seconds (default 120)"`
}

type runOut struct {
	ExitCode  int    `json:"exit_code"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	ExecID    string `json:"exec_id"`
	TimedOut  bool   `json:"timed_out,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
}

// capped keeps the first n bytes written and counts the rest.
type capped struct {
	buf  bytes.Buffer
	n    int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.n - c.buf.Len(); room < len(p) {
		c.over = true
		c.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return c.buf.Write(p)
}

func (t *Tools) run(ctx context.Context, req *mcp.CallToolRequest, in runIn) (*mcp.CallToolResult, runOut, error) {
	c, err := t.For(ctx, req)
	if err != nil {
		return nil, runOut{}, err
	}
	if strings.TrimSpace(in.Command) == "" {
		return nil, runOut{}, fmt.Errorf("run_command: command is empty")
	}
	to := 120 * time.Second
	if in.TimeoutSeconds > 0 {
		to = time.Duration(in.TimeoutSeconds) * time.Second
	}
	stdout, stderr := &capped{n: MaxOutput}, &capped{n: MaxOutput}
	res, err := c.Exec(ctx, in.SandboxID, client.ExecRequest{Shell: in.Command, Cwd: in.Cwd, Env: in.Env,
		Timeout: client.Duration(to)}, stdout, stderr)
	if err != nil {
		return nil, runOut{}, fmt.Errorf("run_command: %w", err)
	}
	return nil, runOut{ExitCode: res.ExitCode, Stdout: stdout.buf.String(), Stderr: stderr.buf.String(), ExecID: res.ID,
		TimedOut: res.TimedOut, Truncated: res.Truncated || stdout.over || stderr.over}, nil
}

type pathIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox, from create_sandbox"`
	Path      string `json:"path" jsonschema:"absolute path inside the sandbox, e.g. /workspace/notes.txt"`
}

type readOut struct {
	Path      string `json:"path"`
	Content   string `json:"content"`
	Truncated bool   `json:"truncated,omitempty"`
}

func (t *Tools) readFile(ctx context.Context, req *mcp.CallToolRequest, in pathIn) (*mcp.CallToolResult, readOut, error) {
	c, err := t.For(ctx, req)
	if err != nil {
		return nil, readOut{}, err
	}
	var b capped
	b.n = maxRead
	if _, err := c.ReadFile(ctx, in.SandboxID, in.Path, &b); err != nil {
		return nil, readOut{}, fmt.Errorf("read_file %s: %w", in.Path, err)
	}
	return nil, readOut{Path: in.Path, Content: strings.ToValidUTF8(b.buf.String(), "\uFFFD"), Truncated: b.over}, nil
}

type writeIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox, from create_sandbox"`
	Path      string `json:"path" jsonschema:"absolute path inside the sandbox, e.g. /workspace/main.py"`
	Content   string `json:"content" jsonschema:"the whole new content of the file"`
}

type writeOut struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

func (t *Tools) writeFile(ctx context.Context, req *mcp.CallToolRequest, in writeIn) (*mcp.CallToolResult, writeOut, error) {
	c, err := t.For(ctx, req)
	if err != nil {
		return nil, writeOut{}, err
	}
	if dir := path.Dir(in.Path); path.IsAbs(in.Path) && dir != "/" {
		if err := c.Mkdir(ctx, in.SandboxID, dir, true); err != nil {
			return nil, writeOut{}, fmt.Errorf("write_file %s: make %s: %w", in.Path, dir, err)
		}
	}
	fi, err := c.WriteFile(ctx, in.SandboxID, in.Path, 0, int64(len(in.Content)), strings.NewReader(in.Content))
	if err != nil {
		return nil, writeOut{}, fmt.Errorf("write_file %s: %w", in.Path, err)
	}
	return nil, writeOut{Path: in.Path, Size: fi.Size}, nil
}

type listIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox, from create_sandbox"`
	Path      string `json:"path,omitempty" jsonschema:"directory inside the sandbox (default /workspace)"`
}

type entry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Size int64  `json:"size"`
}

type listOut struct {
	Path    string  `json:"path"`
	Entries []entry `json:"entries"`
}

func (t *Tools) listFiles(ctx context.Context, req *mcp.CallToolRequest, in listIn) (*mcp.CallToolResult, listOut, error) {
	c, err := t.For(ctx, req)
	if err != nil {
		return nil, listOut{}, err
	}
	if in.Path == "" {
		in.Path = "/workspace"
	}
	fs, err := c.ListDir(ctx, in.SandboxID, in.Path)
	if err != nil {
		return nil, listOut{}, fmt.Errorf("list_files %s: %w", in.Path, err)
	}
	out := listOut{Path: in.Path, Entries: []entry{}}
	for _, f := range fs {
		out.Entries = append(out.Entries, entry{Name: f.Name, Type: f.Type, Size: f.Size})
	}
	return nil, out, nil
}

type sandboxIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox, from create_sandbox"`
}

type destroyOut struct {
	Destroyed string `json:"destroyed"`
}

func (t *Tools) destroy(ctx context.Context, req *mcp.CallToolRequest, in sandboxIn) (*mcp.CallToolResult, destroyOut, error) {
	c, err := t.For(ctx, req)
	if err != nil {
		return nil, destroyOut{}, err
	}
	if err := c.Delete(ctx, in.SandboxID); err != nil {
		return nil, destroyOut{}, fmt.Errorf("destroy_sandbox: %w", err)
	}
	return nil, destroyOut{Destroyed: in.SandboxID}, nil
}
