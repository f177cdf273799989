package runner

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"time"

	"airlock/audit"
	"airlock/internal/agentwire"
)

// Errors callers can test with errors.Is.
var (
	ErrNotFound    = errors.New("not found")
	ErrUnsupported = errors.New("not supported on this host")
	ErrInvalid     = errors.New("invalid request")
	ErrClosed      = errors.New("runner closed")
	// ErrState: the sandbox is not in a state that allows the request
	// (a command to a paused sandbox, a destroy of one being reset).
	ErrState = errors.New("not in a state that allows this")
)

// Defaults.
const (
	DefaultNoFile      = 4096
	DefaultExecTimeout = 10 * time.Minute
	DefaultMaxCapture  = 1 << 20
	// DefaultMaxFileBytes bounds one file through the files API.
	DefaultMaxFileBytes = 256 << 20
	// EventOutputMax bounds each head and tail of output kept in an exec
	// record.
	EventOutputMax = 4 << 10
)

// WorkspaceMode says how a host directory becomes /workspace.
type WorkspaceMode string

const (
	// WorkspaceBind bind-mounts the host directory; it is chowned to the
	// sandbox user (the container's root) so the sandbox can write to it.
	WorkspaceBind WorkspaceMode = "bind"
	// WorkspaceCopy copies the directory's contents in; the host directory
	// is left untouched.
	WorkspaceCopy WorkspaceMode = "copy"
)

// Workspace is the host directory given to a sandbox at /workspace.
type Workspace struct {
	HostDir string // absolute; empty: an empty /workspace
	Mode    WorkspaceMode
}

// Limits are per-sandbox resource limits. Zero means the default (NoFile)
// or unlimited. Which ones the host enforces is reported in Sandbox.Limits.
type Limits struct {
	NoFile        uint64
	FileSizeBytes uint64
	Procs         uint64 // RLIMIT_NPROC: never applied rootless (see LimitReport)
	MemoryBytes   int64
	CPUs          float64
	Pids          int64
}

// CreateRequest describes a sandbox to create.
type CreateRequest struct {
	// ID is the sandbox's id, chosen by the caller so that what it keys by
	// the id (serve's task secrets) is in place before the sandbox runs
	// anything; "": Config.NewID draws one. Lowercase letters, digits, '_'
	// and '-', at most 63; an id in use, or sharing its first ten
	// characters (the veths' names) with one in use, fails the create with
	// ErrInvalid.
	// A warm pool member keeps its own id (OnID reports it).
	ID     string
	Image  string // e.g. localhost/airlock/busybox:1
	Policy string // policy name, recorded in labels and events
	// Env is the sandbox's whole environment on top of a minimal PATH/HOME;
	// the host environment is never inherited.
	Env       map[string]string
	Workspace Workspace
	// Setup runs, in order, after the network path is in place; a failing
	// command fails the create. Each is an audited exec.
	Setup       [][]string
	ExecTimeout time.Duration // default for each exec; 0: Config.ExecTimeout
	Lifetime    time.Duration // the sandbox is destroyed after this; 0: none
	// IdleTimeout destroys the sandbox (artifacts kept) once no command
	// has run in it for this long; a running command, in the background
	// too, keeps it alive. 0: none.
	IdleTimeout  time.Duration
	Limits       Limits
	ReadOnlyRoot bool // read-only root with tmpfs /tmp, /var/tmp, /run
	// CapAdd grants capabilities beyond DefaultCaps, effective only inside
	// the sandbox's own user and network namespaces. Only the names in
	// AllowedCapAdd are accepted ("NET_RAW" or "CAP_NET_RAW", any case);
	// anything else fails the create with ErrInvalid.
	CapAdd []string
	// Outputs are absolute paths in the sandbox exported as artifacts when
	// it ends (Runner.Artifacts), each as a tar stream.
	Outputs []string
	// Template names a template version ("NAME" for the newest, or
	// "NAME:vN"); its image replaces Image.
	Template string
	// OnID, when set, is called with the sandbox's id when a warm pool
	// member is claimed (its id was drawn when it was made), before its
	// network is bound or any command runs; an error fails the create.
	OnID func(id string) error
}

// LimitReport says which limits are in force for a sandbox and why not.
type LimitReport struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Requested bool   `json:"requested"`
	InForce   bool   `json:"in_force"`
	Reason    string `json:"reason,omitempty"` // why it is not in force
}

// Sandbox is a snapshot of a sandbox's state.
type Sandbox struct {
	ID          string        `json:"id"`
	ContainerID string        `json:"container_id"`
	Image       string        `json:"image"`
	Policy      string        `json:"policy"`
	Address     netip.Addr    `json:"address"` // invalid: no network
	Gateway     netip.Addr    `json:"gateway"`
	HostIf      string        `json:"host_if,omitempty"`
	Created     time.Time     `json:"created"`
	Deadline    time.Time     `json:"deadline,omitzero"`
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	ExecTimeout time.Duration `json:"exec_timeout"`
	ReadOnly    bool          `json:"read_only_root"`
	CapAdd      []string      `json:"cap_add,omitempty"` // beyond DefaultCaps, normalized (CAP_NET_RAW)
	Workspace   Workspace     `json:"workspace"`
	Limits      []LimitReport `json:"limits"`
	State       State         `json:"state"` // creating | running | paused | ending (State)
	phase       phase         // the runner's finer view (setPhase)
	Adopted     bool          `json:"adopted,omitempty"`
	// Agent is how commands run: AgentName (the in-sandbox agent) or
	// PodmanExecName (the engine's exec; AgentError says why).
	Agent      string `json:"agent"`
	AgentError string `json:"agent_error,omitempty"`
	// Outputs are exported as artifacts when the sandbox ends.
	Outputs []string `json:"outputs,omitempty"`
	// ImageID is the image's ID (digest) the sandbox runs from; Template the
	// template version, when it came from one.
	ImageID  string `json:"image_id,omitempty"`
	Template string `json:"template,omitempty"`
}

// SandboxNet is what the network hook learns about a sandbox's veth.
type SandboxNet struct {
	SandboxID   string
	Policy      string
	HostIfName  string
	HostIfIndex int
	Addr        netip.Addr       // the sandbox's /32
	MAC         net.HardwareAddr // the sandbox end's MAC: PeerMAC(Addr)
	Gateway     netip.Addr
	Adopted     bool // re-attaching after a restart (reconcile)
	// Unbound: a warm pool member. Attach the path with no identity (no
	// policy, nothing registered): every packet is dropped until a claim
	// calls the hook again for the same interface with the policy.
	Unbound bool
}

// AttachFunc installs the sandbox's network path on the host end of its
// veth. It is called before the peer is moved into the sandbox, so no packet
// can leave before the path is in place. detach is called at destroy.
type AttachFunc func(hostIfindex int, n SandboxNet) (detach func() error, err error)

// ExecRequest is one command to run in a sandbox.
type ExecRequest struct {
	Argv    []string
	Shell   string            // a shell line for /bin/sh -c, instead of Argv
	User    string            // name, uid or uid:gid in the sandbox; empty: root
	Cwd     string            // default /workspace
	Env     map[string]string // added to the sandbox's environment
	Stdin   io.Reader         // nil: none
	Stdout  io.Writer         // streamed as produced; nil: captured only
	Stderr  io.Writer
	Timeout time.Duration // 0: the sandbox's exec timeout
	// MaxCapture bounds each captured stream; 0: DefaultMaxCapture.
	MaxCapture int
	// Agent only (ErrUnsupported through the engine): a PTY of Rows x
	// Cols (Stdout gets its output; Resize changes its size), and
	// background commands, which return once started and are followed
	// with Attach, Wait, Kill.
	TTY        bool
	Rows, Cols uint16
	Resize     <-chan agentwire.Resize
	Background bool
	// Record (TTY only) keeps the session as a shell record: what was
	// typed and shown, timed, secrets redacted, bounded
	// (MaxShellRecordBytes); an artifact when the sandbox ends. Principal
	// names who opened it, in the record.
	Record    bool
	Principal string
	setup     bool // a setup command of a create or reset
}

// ExecResult is how a command ended. Captured output beyond MaxCapture is
// cut and ends with TruncationMarker. ExitCode is -1 when the engine failed
// (Exec then also returns an error).
type ExecResult struct {
	ID              string        `json:"id"`
	ExitCode        int           `json:"exit_code"`
	Stdout          []byte        `json:"stdout"`
	Stderr          []byte        `json:"stderr"`
	StdoutTruncated bool          `json:"stdout_truncated"`
	StderrTruncated bool          `json:"stderr_truncated"`
	Duration        time.Duration `json:"duration"`
	TimedOut        bool          `json:"timed_out"`
	Killed          bool          `json:"killed"`
	Limit           string        `json:"limit,omitempty"` // the limit that ended it (LimitOf)
	// From the agent (zero through the engine).
	Agent       string `json:"agent,omitempty"`
	Pid         int    `json:"pid,omitempty"`
	Signal      string `json:"signal,omitempty"`
	Background  bool   `json:"background,omitempty"`
	Running     bool   `json:"running,omitempty"` // a background command not ended yet
	Reaped      int    `json:"reaped,omitempty"`
	UtimeUS     int64  `json:"utime_us,omitempty"`
	StimeUS     int64  `json:"stime_us,omitempty"`
	MaxRSSKB    int64  `json:"maxrss_kb,omitempty"`
	StdoutBytes int64  `json:"stdout_bytes,omitempty"`
	StderrBytes int64  `json:"stderr_bytes,omitempty"`
}

// The limits that can end a command (ExecResult.Limit, exec.limit),
// defined with the event schema.
const (
	LimitTimeout = audit.ExecLimitTimeout
	LimitFsize   = audit.ExecLimitFsize
	LimitCPU     = audit.ExecLimitCPU
)

// LimitOf names the limit that ended a command that timed out or was
// ended by signal (agentwire's name: "XFSZ"), "" when no limit did.
func LimitOf(timedOut bool, signal string) string {
	switch {
	case timedOut:
		return LimitTimeout
	case signal == "XFSZ":
		return LimitFsize
	case signal == "XCPU":
		return LimitCPU
	}
	return ""
}

// TruncationMarker ends a captured stream that was cut.
const TruncationMarker = "\n[airlock: output truncated]\n"

// Snapshot is the result of committing a sandbox to a local image.
type Snapshot struct {
	Image   string `json:"image"`
	ImageID string `json:"image_id"`
	Warning string `json:"warning"`
}

// SnapshotWarning is returned with every snapshot.
const SnapshotWarning = "the snapshot image holds everything written in the sandbox " +
	"(files, shell history, any credential the agent saw); treat it as sensitive and remove it when done"

// Change is one changed path in a workspace diff.
type Change struct {
	Path   string `json:"path"`
	Kind   string `json:"kind"` // added | modified | deleted
	Binary bool   `json:"binary,omitempty"`
	Size   int64  `json:"size,omitempty"` // the file's size now (0 once deleted)
}

// Diff is the review artifact of a sandbox's /workspace since creation.
type Diff struct {
	Changes []Change `json:"changes"`
	Patch   string   `json:"patch"` // unified diff of the text files
}
