// Package client is the Go client of Airlock's control API (HTTP+JSON on
// a unix socket, or TCP with a bearer token; docs/api.md). The airlock CLI
// uses it; so can agent frameworks. The wire types live here too, so the
// server (serve/) and every client share one definition.
package client

import (
	"airlock/audit/schema"
	"airlock/client/wire"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// APIVersion is the path prefix of this version of the API.
const APIVersion = "/v1"

// Sandbox is a sandbox as the API reports it.
type Sandbox struct {
	ID         string            `json:"id"`
	Image      string            `json:"image"`
	Policy     string            `json:"policy"`
	PolicyHash string            `json:"policy_hash,omitempty"`
	Address    string            `json:"address,omitempty"`
	State      State             `json:"state"`
	Created    time.Time         `json:"created"`
	Workspace  string            `json:"workspace,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	Secrets    []string          `json:"secrets,omitempty"` // names only, never values
	Limits     []string          `json:"limits,omitempty"`  // limits in force, e.g. "nofile=1024"
	Warnings   []string          `json:"warnings,omitempty"`
	// Agent is how commands run: airlock-init (the in-sandbox agent) or
	// podman-exec (the fallback; no background, TTY, user or files API).
	Agent string `json:"agent,omitempty"`
	// ImageID is the image's ID (digest) the sandbox runs from; Template
	// the template version, when it came from one.
	ImageID  string `json:"image_id,omitempty"`
	Template string `json:"template,omitempty"`
	// Owner is the principal that created it ("": the admins', e.g. one
	// made before principals); only it or an admin may act on it.
	// Deadline is when its lifetime ends (it is then destroyed, its
	// artifacts kept); zero: no lifetime.
	Owner    string    `json:"owner,omitempty"`
	Deadline time.Time `json:"deadline,omitzero"`
	// IdleTimeout: it is destroyed once no command ran for this long.
	IdleTimeout Duration `json:"idle_timeout,omitempty"`
	// Lockfiles are the lockfiles it was created with
	// (CreateRequest.Lockfiles): names and entry counts, never content.
	Lockfiles []SandboxLockfile `json:"lockfiles,omitempty"`
}

// SandboxLockfile is a lockfile a sandbox was created with: its name and
// how many package entries (a name at a version) it has.
type SandboxLockfile struct {
	Name    string `json:"name"`
	Entries int    `json:"entries"`
}

// State is a sandbox's lifecycle state: creating, running, paused, ending
// or ended (docs/api.md, "Sandbox states"). An older appliance's
// "destroying" reads as ending.
type State = schema.SandboxState

// The states, in lifecycle order.
const (
	StateCreating = schema.StateCreating
	StateRunning  = schema.StateRunning
	StatePaused   = schema.StatePaused
	StateEnding   = schema.StateEnding
	StateEnded    = schema.StateEnded
)

// CreateRequest asks for a new sandbox.
type CreateRequest struct {
	Image     string            `json:"image,omitempty"`  // "" = the appliance's default
	Policy    string            `json:"policy,omitempty"` // "" = the appliance's default
	Env       map[string]string `json:"env,omitempty"`
	Workspace string            `json:"workspace,omitempty"` // host directory given to the sandbox at /workspace
	// WorkspaceMode is "bind" (the default: the directory is mounted and
	// the sandbox's changes land in it) or "copy" (its contents are copied
	// in; the host directory is left untouched).
	WorkspaceMode string `json:"workspace_mode,omitempty"`
	// WorkspaceGit is an https URL cloned into /workspace (git clone
	// --depth 1) as the first setup step, from inside the sandbox and so
	// through the proxy and its policy. It excludes Workspace; it must
	// carry no credentials (see ValidateGitURL). The image needs git.
	WorkspaceGit string     `json:"workspace_git,omitempty"`
	Setup        [][]string `json:"setup,omitempty"` // commands run before the sandbox is ready
	// Secrets are task-scoped secrets, held by the appliance in memory for
	// injection by the proxy, never written into the sandbox.
	Secrets     map[string]string `json:"secrets,omitempty"`
	ExecTimeout Duration          `json:"exec_timeout,omitempty"`
	Lifetime    Duration          `json:"lifetime,omitempty"`
	// IdleTimeout destroys the sandbox (artifacts kept) once no command
	// has run in it for this long; 0: sandbox.idle_timeout.
	IdleTimeout Duration          `json:"idle_timeout,omitempty"`
	ReadOnly    bool              `json:"read_only,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	// CapAdd grants capabilities inside the sandbox's own namespaces beyond
	// the minimal default set; only NET_RAW and NET_ADMIN may be asked for.
	// The kernel path holds regardless: they reach nothing the sandbox
	// could not reach without them.
	CapAdd []string `json:"cap_add,omitempty"`
	// Outputs are absolute paths in the sandbox kept as artifacts when it
	// ends, however it ends (see Client.Artifacts).
	Outputs []string `json:"outputs,omitempty"`
	// Template is a template version ("NAME" for the newest, "NAME:vN")
	// the sandbox starts from instead of Image.
	Template string `json:"template,omitempty"`
	// Lockfiles restrict the sandbox's package installs, in every
	// registries category of its policy, to the versions they list:
	// others are hidden from metadata and their downloads denied
	// (not_in_lockfile), and an artifact must match the lockfile's digest
	// (integrity_mismatch). See Lockfile for the formats.
	Lockfiles []Lockfile `json:"lockfiles,omitempty"`
}

// Lockfile is a lockfile's content and the name it is known by: npm's
// package-lock.json (or npm-shrinkwrap.json, lockfileVersion 1 to 3),
// requirements.txt with --hash, uv.lock or poetry.lock. The format is
// told by the name, else by the content; errors name the file and line.
type Lockfile struct {
	Name    string `json:"name"`
	Content string `json:"content"`
}

// TTYUpgrade is the Upgrade header value of a terminal exec.
const TTYUpgrade = "airlock-tty"

// Process is a command the sandbox's agent knows.
type Process struct {
	ID       string    `json:"id"`
	Pid      int       `json:"pid"`
	Argv     []string  `json:"argv"`
	Cwd      string    `json:"cwd,omitempty"`
	User     string    `json:"user,omitempty"`
	TTY      bool      `json:"tty,omitempty"`
	Started  time.Time `json:"started"`
	Running  bool      `json:"running"`
	ExitCode *int      `json:"exit_code,omitempty"`
	Signal   string    `json:"signal,omitempty"`
	TimedOut bool      `json:"timed_out,omitempty"`
	Killed   bool      `json:"killed,omitempty"`
}

// FileInfo describes a path in a sandbox.
type FileInfo struct {
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // permission bits
	Type    string    `json:"type"` // file | dir | symlink | other
	ModTime time.Time `json:"mod_time"`
	UID     int       `json:"uid"`
	GID     int       `json:"gid"`
	Symlink string    `json:"symlink,omitempty"`
}

// Signal is the body of a signal request: TERM, SIGTERM or a number.
type Signal struct {
	Signal string `json:"signal"`
}

// Snapshot is the image a sandbox was committed to.
type Snapshot struct {
	Image   string `json:"image"`
	Warning string `json:"warning"`
}

// FileChange is one changed path under /workspace.
type FileChange struct {
	Path   string `json:"path"`
	Change string `json:"change"` // added | modified | deleted
}

// Diff is what changed under /workspace since the sandbox was created.
type Diff struct {
	Changes []FileChange `json:"changes"`
	Patch   string       `json:"patch,omitempty"` // unified diff of text files
}

// PolicyInfo is one loaded policy.
type PolicyInfo struct {
	Name string `json:"name"`
	File string `json:"file"`
	Hash string `json:"hash"`
}

// PolicyChange is one policy a reload replaced, added or rejected.
type PolicyChange struct {
	Name    string   `json:"name"`
	OldHash string   `json:"old_hash,omitempty"`
	NewHash string   `json:"new_hash,omitempty"`
	Errors  []string `json:"errors,omitempty"` // set when the file was rejected
}

// ReloadResult is the outcome of a policy reload. Rejected policies keep
// running with their old version.
type ReloadResult struct {
	Reloaded  []PolicyChange `json:"reloaded,omitempty"`
	Rejected  []PolicyChange `json:"rejected,omitempty"`
	Unchanged []string       `json:"unchanged,omitempty"`
	// ClosedTunnels is how many open spliced tunnels the reload closed
	// because the new policy denies them.
	ClosedTunnels int `json:"closed_tunnels,omitempty"`
}

// LogQuery filters the audit log: the audit store's query, sent as URL
// parameters (sandbox, kind, verdict, category, rule, host, since, until,
// after_seq, limit, newest).
type LogQuery = schema.Query

// Approval is a held request waiting for (or given) a human decision.
type Approval struct {
	ID          string    `json:"id"`
	Sandbox     string    `json:"sandbox"`
	Destination string    `json:"destination"`
	Category    string    `json:"category,omitempty"`
	Rule        string    `json:"rule"`
	Command     string    `json:"command,omitempty"` // the command running at the time
	Held        time.Time `json:"held"`
	Expires     time.Time `json:"expires"`
	State       string    `json:"state"` // held | approved | denied | expired
	DecidedBy   string    `json:"decided_by,omitempty"`
	For         string    `json:"for,omitempty"`
	Reason      string    `json:"reason,omitempty"` // why an agent asked (request_access)
}

// Decision is a human's answer to a held request.
type Decision struct {
	Approve bool     `json:"approve"`
	Once    bool     `json:"once,omitempty"` // only this request
	For     Duration `json:"for,omitempty"`  // allow the destination for this long
}

// Summary is a sandbox's egress at a glance, for `airlock run`.
type Summary struct {
	Sandbox    string            `json:"sandbox"`
	Categories []CategoryCount   `json:"categories,omitempty"`
	Denied     []DeniedAttempt   `json:"denied,omitempty"`
	DNSNames   []string          `json:"dns_names,omitempty"`
	Drops      uint64            `json:"drops,omitempty"`
	Counts     map[string]uint64 `json:"counts,omitempty"` // events by kind
	Report     string            `json:"report,omitempty"` // how to get the review report
}

// CategoryCount is the allowed destinations of one category.
type CategoryCount struct {
	Category     string   `json:"category"`
	Requests     uint64   `json:"requests"`
	Destinations []string `json:"destinations"`
}

// DeniedAttempt is one denied destination and the rule that denied it.
type DeniedAttempt struct {
	Destination string `json:"destination"`
	Kind        string `json:"kind"` // dns | flow | http | drop
	Rule        string `json:"rule"`
	Reason      string `json:"reason,omitempty"`
	Count       uint64 `json:"count"`
}

// Health is the appliance's state.
type Health struct {
	Status     string            `json:"status"` // ok | degraded
	Version    string            `json:"version"`
	Sandboxes  int               `json:"sandboxes"`
	Components map[string]string `json:"components,omitempty"` // name → "ok" or the problem
}

// The exec stream's types and the API's error body are defined in
// client/wire, which links no HTTP stack (bin/airlock runs `sandbox exec`
// with it alone); they are the same types here.
type (
	ExecRequest = wire.ExecRequest
	ExecResult  = wire.ExecResult
	ExecFrame   = wire.ExecFrame
	Error       = wire.Error
	Duration    = wire.Duration
)

// Error codes.
const (
	CodeInvalid      = "invalid"
	CodeNotFound     = "not_found"
	CodeConflict     = "conflict"
	CodeUnsupported  = "unsupported"
	CodeUnavailable  = "unavailable"
	CodeUnauthorized = "unauthorized"
	// CodeForbidden: the caller's principal lacks the scope, or its quota
	// does not allow what it asked for (a policy, an image, a limit).
	CodeForbidden = "forbidden"
	// CodeQuotaExceeded: a limit on how much may run at once is reached.
	CodeQuotaExceeded = "quota_exceeded"
	CodeInternal      = "internal"
)

// Errorf builds an *Error with the status that goes with code.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Status: statusOf(code), Code: code, Message: fmt.Sprintf(format, args...)}
}

func statusOf(code string) int {
	switch code {
	case CodeInvalid:
		return http.StatusBadRequest
	case CodeNotFound:
		return http.StatusNotFound
	case CodeConflict:
		return http.StatusConflict
	case CodeUnsupported:
		return http.StatusNotImplemented
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeQuotaExceeded:
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}

// IsCode reports whether err is an API error with the given code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}
