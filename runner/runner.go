// Package runner runs Airlock sandboxes: rootless containers, behind a veth
// whose host end carries the appliance's network path, with audited exec,
// files in and out, a workspace diff, snapshots and reconcile after a crash.
//
// The runner talks to the container engine through the Engine interface;
// runner/podman is the Podman adapter. The network path itself (eBPF) is
// installed by the AttachFunc the wiring provides.
package runner

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"airlock/audit"
	"airlock/internal/randid"
	"airlock/internal/safefile"
)

// Config configures a Runner. Engine, Emitter and StateDir are required.
type Config struct {
	Engine  Engine
	Emitter audit.Emitter
	Logger  *slog.Logger // nil: discard
	// Instance names this runner in container labels and veth aliases;
	// reconcile only touches its own. Default "default".
	Instance string
	// StateDir holds resolv.conf, CA bundles and workspace baselines. It and
	// its parents must be searchable by the sandbox user.
	StateDir string
	// Protected are more host directories a workspace may not be, hold or
	// lie in (the appliance's state directory with its CA key, secrets and
	// owners; its policies): a bind would chown them to the sandbox user, a
	// copy would hand them to the sandbox. StateDir, ArtifactDir and
	// TemplateDir are protected without being listed.
	Protected []string
	// SandboxUser owns bind-mounted workspaces (the containers' root maps to
	// it). Default "airlock-sandbox".
	SandboxUser string
	// Pool gives each sandbox a /32; Gateway (default: the pool's first
	// address) is the sandbox's next hop, DNS server and proxy address.
	Pool    netip.Prefix
	Gateway netip.Addr
	// AttachNetwork installs the network path on a new veth. Nil: sandboxes
	// get no network at all (only loopback), which is the safe default.
	AttachNetwork AttachFunc
	// CACertPEM is Airlock's CA, appended to the image's roots in the bundle
	// every sandbox trusts. Nil: the image's own trust store is left alone.
	CACertPEM []byte
	// ProxyURL is put in HTTP(S)_PROXY as a convenience; the path works
	// without it. Empty: not set.
	ProxyURL    string
	ExecTimeout time.Duration    // default per exec; 0: DefaultExecTimeout
	Cgroups     *CgroupSupport   // nil: detected from /sys/fs/cgroup
	NewID       func() string    // nil: 12 random hex digits
	Now         func() time.Time // nil: time.Now

	// AgentBinary is the airlock-init binary run as every sandbox's PID 1
	// (copied, content-addressed, under StateDir/agent/). Empty: the
	// airlock-init beside the running executable (make build puts both in
	// bin/), if there is one. Without it, or with NoAgent, commands go
	// through the engine's exec (Sandbox.Agent says which is in use).
	AgentBinary string
	NoAgent     bool
	// DialAgent connects to the agent of a sandbox whose PID 1 is host pid
	// pid. Nil: runner/agent (root: setns through a pidfd).
	DialAgent func(pid int) (Agent, error)
	// SecretValues are the values to redact from a sandbox's exec records.
	// Nil: none.
	SecretValues func(sandbox string) []string
	// MaxFileBytes bounds one file read or written through the files API;
	// 0: DefaultMaxFileBytes.
	MaxFileBytes int64
	// Artifacts bounds what is kept of a sandbox after it ends, under
	// ArtifactDir (default StateDir/artifacts; it should outlive a reboot
	// when StateDir does not); ArtifactHook adds to it (the review report).
	ArtifactDir string
	// TemplateDir holds template records and build logs (default
	// StateDir/templates).
	TemplateDir  string
	Artifacts    ArtifactConfig
	ArtifactHook ArtifactHook

	// BlockNetwork cuts (on) or restores a sandbox's network in the kernel
	// (serve: the path's per-sandbox block, BlockPause); Pause needs it when
	// sandboxes have a network.
	BlockNetwork func(sandbox string, on bool) error

	hostNet     hostNet       // nil: netlink
	freezer     freezer       // nil: procFreezer
	newMemberID func() string // nil: random (tests)
}

// Runner creates and manages sandboxes. Its methods are safe for concurrent
// use.
type Runner struct {
	cfg      Config
	commands *commandRecorder // cfg.Emitter's first stage: each sandbox's commands.jsonl
	log      *slog.Logger
	net      hostNet
	pool     *pool
	cgroups  CgroupSupport
	uid      int
	gid      int

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	reserved  map[string]bool   // CreateRequest.IDs of creates not yet registered
	roots     map[string][]byte // image ID -> the image's CA roots
	closed    bool
	agentDir  string // host dir holding airlock-init; empty: no agent
	// recovering marks exec ids followed after an adoption: their finished
	// events say recovered.
	recovering sync.Map
	stopWatch  chan struct{} // closed by Close; nil until Watch
	warm       *warmPools    // nil: no warm pools (StartWarm)
}

type sandbox struct {
	info   Sandbox
	detach func() error
	timer  *time.Timer
	idle   idleClock // IdleTimeout's clock
	agent  Agent     // nil: commands through the engine
	// exported: the artifacts were written (by a destroy that then failed).
	exported bool
	ifindex  int               // host end of the veth
	initPid  int               // host PID of its PID 1 when last seen (plumb, agent)
	env      map[string]string // a claim's environment, added to every command
	warmKey  string            // an unclaimed warm member's pool key
	claimed  bool              // a warm member a create claimed: its workspace goes in through the agent
}

// New validates cfg and returns a Runner. It does not touch the engine; call
// Reconcile to adopt sandboxes a previous process left running.
func New(cfg Config) (*Runner, error) {
	if cfg.Engine == nil || cfg.Emitter == nil {
		return nil, fmt.Errorf("runner: Engine and Emitter are required: %w", ErrInvalid)
	}
	if !filepath.IsAbs(cfg.StateDir) || cfg.ArtifactDir != "" && !filepath.IsAbs(cfg.ArtifactDir) {
		return nil, fmt.Errorf("runner: StateDir %q and ArtifactDir %q must be absolute paths: %w", cfg.StateDir, cfg.ArtifactDir, ErrInvalid)
	}
	setDefaults(&cfg)
	commands := &commandRecorder{next: cfg.Emitter, dir: filepath.Join(cfg.StateDir, "sandboxes"),
		max: cfg.Artifacts.MaxCommandsBytes, log: cfg.Logger}
	cfg.Emitter = commands
	r := &Runner{cfg: cfg, log: cfg.Logger, commands: commands, net: cfg.hostNet, uid: -1, gid: -1,
		sandboxes: map[string]*sandbox{}, reserved: map[string]bool{}, roots: map[string][]byte{}}
	if r.net == nil {
		r.net = netlinkHost{}
	}
	if cfg.Cgroups != nil {
		r.cgroups = *cfg.Cgroups
	} else {
		r.cgroups = DetectCgroups()
	}
	if cfg.AttachNetwork != nil {
		p, err := newPool(cfg.Pool, cfg.Gateway)
		if err != nil {
			return nil, fmt.Errorf("runner: %w", err)
		}
		r.pool = p
	}
	if u, err := user.Lookup(cfg.SandboxUser); err == nil {
		r.uid, _ = strconv.Atoi(u.Uid)
		r.gid, _ = strconv.Atoi(u.Gid)
	}
	if err := r.prepareStateDir(); err != nil {
		return nil, err
	}
	if err := r.installAgent(); err != nil {
		return nil, err
	}
	r.pruneArtifacts("")
	return r, nil
}

func setDefaults(cfg *Config) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Instance == "" {
		cfg.Instance = "default"
	}
	if cfg.SandboxUser == "" {
		cfg.SandboxUser = "airlock-sandbox"
	}
	if cfg.ExecTimeout <= 0 {
		cfg.ExecTimeout = DefaultExecTimeout
	}
	if cfg.NewID == nil {
		cfg.NewID = func() string { return randid.Hex(6) }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Artifacts = cfg.Artifacts.withDefaults()
	if cfg.TemplateDir == "" {
		cfg.TemplateDir = filepath.Join(cfg.StateDir, "templates")
	}
	if cfg.ArtifactDir == "" {
		cfg.ArtifactDir = filepath.Join(cfg.StateDir, "artifacts")
	}
}

// prepareStateDir creates the state directory: public files (resolv.conf, CA
// bundles) must be readable by the sandbox user for their bind mounts.
func (r *Runner) prepareStateDir() error {
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{r.cfg.StateDir, 0o711}, {r.caDir(), 0o755}, {r.sandboxesDir(), 0o700}, {r.artifactsDir(), 0o700}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return fmt.Errorf("runner: state dir: %w", err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return fmt.Errorf("runner: state dir: %w", err)
		}
	}
	if r.pool != nil {
		conf := fmt.Sprintf("# written by airlock: the gateway answers DNS\nnameserver %s\noptions edns0\n", r.pool.gw)
		if err := safefile.WriteAtomic(r.resolvConf(), []byte(conf), 0o644); err != nil {
			return fmt.Errorf("runner: %w", err)
		}
	}
	if r.uid >= 0 {
		if err := searchable(r.caDir(), r.uid, r.gid); err != nil {
			return fmt.Errorf("runner: state dir: %w", err)
		}
	}
	return nil
}

func (r *Runner) caDir() string { return filepath.Join(r.cfg.StateDir, "ca") }

// removeState removes a sandbox's state directory and closes its
// commands.jsonl, which the recorder kept open.
func (r *Runner) removeState(id string) error {
	err := os.RemoveAll(filepath.Join(r.sandboxesDir(), id))
	r.commands.close(id)
	return err
}

func (r *Runner) sandboxesDir() string { return filepath.Join(r.cfg.StateDir, "sandboxes") }
func (r *Runner) resolvConf() string   { return filepath.Join(r.cfg.StateDir, "resolv.conf") }
func (r *Runner) baselinePath(id string) string {
	return filepath.Join(r.sandboxesDir(), id, "baseline.tar")
}

// Get returns the sandbox with the given id.
func (r *Runner) Get(id string) (Sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.sandboxes[id]
	if !ok || sb.info.phase == phasePooled {
		return Sandbox{}, fmt.Errorf("sandbox %q: %w", id, ErrNotFound)
	}
	return sb.info, nil
}

// List returns every known sandbox, oldest first.
func (r *Runner) List() []Sandbox {
	r.mu.Lock()
	out := make([]Sandbox, 0, len(r.sandboxes))
	for _, sb := range r.sandboxes {
		if sb.info.phase != phasePooled {
			out = append(out, sb.info)
		}
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Close stops lifetime timers and the warm pools' refill. Sandboxes keep running: a new Runner adopts
// them with Reconcile. Close is safe to call more than once.
func (r *Runner) Close() error {
	r.stopWarm()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed && r.stopWatch != nil {
		close(r.stopWatch)
	}
	r.closed = true
	r.commands.closeAll()
	for _, sb := range r.sandboxes {
		if sb.timer != nil {
			sb.timer.Stop()
		}
		sb.stopIdle()
	}
	return nil
}

// running returns the sandbox id if it exists and is running.
func (r *Runner) running(id string) (Sandbox, error) {
	return r.live(id, false)
}

// live is running; setup also admits a sandbox being reset, whose setup
// commands run again in its new container.
func (r *Runner) live(id string, setup bool) (Sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return Sandbox{}, ErrClosed
	}
	sb, ok := r.sandboxes[id]
	if !ok {
		return Sandbox{}, fmt.Errorf("sandbox %q: %w", id, ErrNotFound)
	}
	if p := sb.info.phase; p != phaseRunning && p != phaseCreating && (!setup || p != phaseResetting) {
		return Sandbox{}, fmt.Errorf("sandbox %q is %s: %w", id, p, ErrState)
	}
	return sb.info, nil
}

// stateAt is the state a lifecycle record of stage shows: the sandbox's
// own, ended once it is gone (a create that failed), ending while a
// sandbox a restart did not adopt is removed.
func (r *Runner) stateAt(id, stage string) State {
	switch stage {
	case "destroyed":
		return audit.StateEnded
	case "reconciled":
		return audit.StateEnding
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if sb, ok := r.sandboxes[id]; ok {
		return sb.info.State
	}
	return audit.StateEnded
}

func (r *Runner) setPhase(id string, p phase) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sb, ok := r.sandboxes[id]; ok {
		sb.info.setPhase(p)
	}
}

// update changes a sandbox's info under the lock.
func (r *Runner) update(sb *sandbox, f func(*Sandbox)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&sb.info)
}

// lifecycle emits a lifecycle event of the appliance acting on its own.
func (r *Runner) lifecycle(sb Sandbox, stage, detail string) {
	r.emitLifecycle(sb, stage, detail, nil, "")
}

// lifecycleBy emits a lifecycle event of an action asked for in ctx: it
// names the principal there (audit.WithPrincipal).
func (r *Runner) lifecycleBy(ctx context.Context, sb Sandbox, stage, detail string) {
	r.emitLifecycle(sb, stage, detail, nil, audit.PrincipalFrom(ctx))
}

func (r *Runner) emitLifecycle(sb Sandbox, stage, detail string, changes []audit.FileChange, principal string) {
	e := audit.New(audit.KindLifecycle, sb.ID)
	e.Lifecycle = &audit.Lifecycle{Stage: stage, State: r.stateAt(sb.ID, stage), Principal: principal, Image: sb.Image,
		Policy: sb.Policy, Detail: detail, Changes: changes, ImageID: sb.ImageID, Template: sb.Template}
	if sb.Address.IsValid() {
		e.Lifecycle.Address = sb.Address.String()
	}
	r.cfg.Emitter.Emit(e)
	level := slog.LevelInfo
	if stage == "failed" {
		level = slog.LevelWarn
	}
	r.log.Log(context.Background(), level, "sandbox "+stage, "sandbox", sb.ID, "image", sb.Image,
		"image_id", sb.ImageID, "template", sb.Template, "policy", sb.Policy, "address", sb.Address, "detail", detail)
}

// discardErr wraps a writer so a failing consumer (a client that went away)
// never stops the capture.
type discardErr struct{ w io.Writer }

func (d *discardErr) Write(p []byte) (int, error) {
	if d.w != nil {
		if _, err := d.w.Write(p); err != nil {
			d.w = nil
		}
	}
	return len(p), nil
}
