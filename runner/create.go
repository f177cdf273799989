package runner

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"airlock/internal/safefile"
	"airlock/internal/tardir"
)

// Create creates a sandbox and returns once its network path is in place,
// the workspace is in and the setup commands succeeded. On any failure
// everything created so far is removed and a "failed" event is emitted.
func (r *Runner) Create(ctx context.Context, req CreateRequest) (Sandbox, error) {
	tmpl := ""
	if req.Template != "" {
		t, err := r.Template(req.Template)
		if err != nil {
			return Sandbox{}, fmt.Errorf("create sandbox: %w", err)
		}
		req.Image, tmpl = t.Image, t.Ref
	}
	if err := validateCreate(req); err != nil {
		return Sandbox{}, err
	}
	if err := r.checkWorkspace(req.Workspace.HostDir); err != nil {
		return Sandbox{}, err
	}
	if p := realPath(req.Workspace.HostDir); p != "" {
		req.Workspace.HostDir = p // bound and chowned as checked, not through a link
	}
	if r.isClosed() {
		return Sandbox{}, ErrClosed
	}
	if info, ok, err := r.tryClaim(ctx, req, tmpl); ok {
		return info, err
	}
	id := req.ID
	if id == "" {
		id = r.cfg.NewID()
	} else if !r.reserve(id) {
		return Sandbox{}, fmt.Errorf("create sandbox: id %s is in use: %w", id, ErrInvalid)
	} else {
		defer r.release(id)
	}
	now := r.cfg.Now().UTC()
	info := Sandbox{ID: id, Image: req.Image, Policy: req.Policy, Created: now,
		ExecTimeout: cmpOr(req.ExecTimeout, r.cfg.ExecTimeout), ReadOnly: req.ReadOnlyRoot,
		Workspace: req.Workspace, Limits: limitReport(req.Limits, r.cgroups), Outputs: slices.Clone(req.Outputs), Template: tmpl}
	info.setPhase(phaseCreating)
	info.CapAdd, _ = NormalizeCapAdd(req.CapAdd) // validated above
	if req.Lifetime > 0 {
		info.Deadline = now.Add(req.Lifetime)
	}
	info.IdleTimeout = req.IdleTimeout
	sb := &sandbox{info: info}
	if err := r.create(ctx, sb, req); err != nil {
		r.abort(sb)
		r.lifecycleBy(ctx, sb.info, "failed", err.Error())
		return Sandbox{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	r.mu.Lock()
	ready := sb.info.phase == phaseCreating // not if a Destroy raced in
	if ready {
		sb.info.setPhase(phaseRunning)
	}
	info = sb.info
	r.mu.Unlock()
	if ready {
		r.lifecycleBy(ctx, info, "ready", fmt.Sprintf("%d setup commands run; took %s", len(req.Setup), r.cfg.Now().Sub(now).Round(time.Millisecond)))
	}
	r.startTimer(sb) // after the state is final: the timer may destroy it at once
	return info, nil
}

// SetupError is a create's setup command that failed: it could not run
// (Err), or it ran and exited non-zero. A caller that added a setup
// command of its own (serve's workspace_git clone) finds it by Index.
type SetupError struct {
	Index    int // in CreateRequest.Setup, from 0
	Argv     []string
	ExitCode int    // when Err is nil
	Stderr   string // the tail of its standard error, when it exited
	Err      error  // the exec failed before the command's exit
}

func (e *SetupError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("setup command %d %q: %v", e.Index, e.Argv, e.Err)
	}
	return fmt.Sprintf("setup command %d %q exited %d: %s", e.Index, e.Argv, e.ExitCode, e.Stderr)
}

func (e *SetupError) Unwrap() error { return e.Err }

// sandboxID is what CreateRequest.ID may be: the shape of the ids
// Config.NewID draws, safe in a path, a container name and a label.
var sandboxID = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// checkWorkspace refuses a workspace that is, holds or lies in one of the
// appliance's own directories (Config.Protected, StateDir, ArtifactDir,
// TemplateDir), through a symbolic link at either end too.
func (r *Runner) checkWorkspace(dir string) error {
	if dir == "" {
		return nil
	}
	var own []string
	for _, p := range append([]string{r.cfg.StateDir, r.cfg.ArtifactDir, r.cfg.TemplateDir}, r.cfg.Protected...) {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return fmt.Errorf("create sandbox: appliance directory %q: %w", p, err)
		}
		own = append(own, abs)
		if real := realPath(abs); real != "" && real != abs {
			own = append(own, real)
		}
	}
	for _, d := range []string{filepath.Clean(dir), realPath(dir)} {
		if d == "" {
			continue
		}
		for _, o := range own {
			if d == o || d == "/" || strings.HasPrefix(o, d+"/") || strings.HasPrefix(d, o+"/") {
				return fmt.Errorf("create sandbox: workspace %q holds or is inside the appliance's directory %s: %w", dir, o, ErrInvalid)
			}
		}
	}
	return nil
}

// realPath is dir with its symbolic links resolved, or "" (for "" too:
// EvalSymlinks makes that ".").
func realPath(dir string) string {
	if dir == "" {
		return ""
	}
	p, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return ""
	}
	return p
}

func validateCreate(req CreateRequest) error {
	switch {
	case req.ID != "" && !sandboxID.MatchString(req.ID):
		return fmt.Errorf("create sandbox: id %q: want lowercase letters, digits, '_' or '-' (at most 63): %w", req.ID, ErrInvalid)
	case req.Image == "":
		return fmt.Errorf("create sandbox: image is required: %w", ErrInvalid)
	case req.Policy == "":
		return fmt.Errorf("create sandbox: policy is required: %w", ErrInvalid)
	case req.Workspace.HostDir != "" && !filepath.IsAbs(req.Workspace.HostDir):
		return fmt.Errorf("create sandbox: workspace %q must be an absolute path: %w", req.Workspace.HostDir, ErrInvalid)
	case req.Workspace.HostDir != "" && req.Workspace.Mode != WorkspaceBind && req.Workspace.Mode != WorkspaceCopy:
		return fmt.Errorf("create sandbox: workspace mode %q: want %q or %q: %w", req.Workspace.Mode, WorkspaceBind, WorkspaceCopy, ErrInvalid)
	case req.Lifetime < 0 || req.ExecTimeout < 0 || req.IdleTimeout < 0:
		return fmt.Errorf("create sandbox: negative timeout: %w", ErrInvalid)
	}
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("create sandbox: bad environment variable name %q: %w", k, ErrInvalid)
		}
	}
	for i, argv := range req.Setup {
		if len(argv) == 0 {
			return fmt.Errorf("create sandbox: setup command %d is empty: %w", i, ErrInvalid)
		}
	}
	if err := validOutputs(req.Outputs); err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	if _, err := NormalizeCapAdd(req.CapAdd); err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	return nil
}

func (r *Runner) create(ctx context.Context, sb *sandbox, req CreateRequest) error {
	id := sb.info.ID
	imageID, err := r.cfg.Engine.ImageID(ctx, req.Image)
	if err != nil {
		return fmt.Errorf("image %s: %w (build the sandbox images with 'make image')", req.Image, err)
	}
	sb.info.ImageID = imageID
	in := SpecInput{ImageID: imageID, Template: sb.info.Template, Instance: r.cfg.Instance, ID: id, Req: req, Created: sb.info.Created,
		Deadline: sb.info.Deadline, ExecTimeout: sb.info.ExecTimeout, Cgroups: r.cgroups, ProxyURL: r.cfg.ProxyURL,
		AgentDir: r.agentDir}
	if r.pool != nil {
		if in.Address, err = r.pool.alloc(); err != nil {
			return err
		}
		sb.info.Address, sb.info.Gateway, in.Gateway = in.Address, r.pool.gw, r.pool.gw
		in.ResolvConf = r.resolvConf()
	}
	if in.CABundle, err = r.caBundle(ctx, req.Image, imageID); err != nil {
		return err
	}
	if err := r.prepareWorkspace(req.Workspace); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(r.sandboxesDir(), id), 0o700); err != nil {
		return err
	}
	r.register(sb)
	spec := BuildSpec(in)
	if err := r.saveRecipe(id, recipe{Spec: spec, Setup: req.Setup, ImageID: imageID}); err != nil {
		return fmt.Errorf("keep the create recipe: %w", err)
	}
	cid, err := r.cfg.Engine.Create(ctx, spec)
	if err != nil {
		return fmt.Errorf("create container: %w", err)
	}
	r.update(sb, func(i *Sandbox) { i.ContainerID = cid })
	r.lifecycleBy(ctx, sb.info, "created", "")
	if err := r.cfg.Engine.Start(ctx, cid); err != nil {
		return fmt.Errorf("start container: %w", err)
	}
	if err := r.plumb(ctx, sb); err != nil {
		return err
	}
	r.connectAgent(ctx, sb, spec.Labels)
	r.lifecycleBy(ctx, sb.info, "started", imageSummary(sb.info)+"; "+limitSummary(sb.info.Limits)+"; commands through "+sb.info.Agent)
	return r.provision(ctx, sb, req)
}

// provision puts the workspace in, runs setup and records the baseline.
func (r *Runner) provision(ctx context.Context, sb *sandbox, req CreateRequest) error {
	id := sb.info.ID
	w := req.Workspace
	if a := r.agentOf(id); a != nil && sb.claimed && w.HostDir != "" && w.Mode == WorkspaceCopy {
		if err := r.copyInAgent(ctx, a, w.HostDir); err != nil {
			return err
		}
	} else if w.HostDir != "" && w.Mode == WorkspaceCopy {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tardir.Write(pw, w.HostDir, "")) }()
		if err := r.cfg.Engine.CopyIn(ctx, sb.info.ContainerID, WorkspaceDir, pr); err != nil {
			pr.CloseWithError(err)
			return fmt.Errorf("copy workspace in: %w", err)
		}
	}
	for i, argv := range req.Setup {
		res, err := r.Exec(ctx, id, ExecRequest{Argv: argv, MaxCapture: 4096, setup: true})
		if err != nil {
			return &SetupError{Index: i, Argv: argv, Err: err}
		}
		if res.ExitCode != 0 {
			return &SetupError{Index: i, Argv: argv, ExitCode: res.ExitCode, Stderr: tail(res.Stderr, 512)}
		}
	}
	if err := r.recordBaseline(ctx, sb, w, len(req.Setup) > 0); err != nil {
		return fmt.Errorf("workspace baseline: %w", err)
	}
	return nil
}

// recordBaseline keeps /workspace as the agent is handed it, for Diff. When
// no setup command ran, it is the host directory itself (or empty), read on
// the host without a round trip to the engine.
func (r *Runner) recordBaseline(ctx context.Context, sb *sandbox, w Workspace, ranSetup bool) error {
	f, err := os.OpenFile(r.baselinePath(sb.info.ID), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	switch {
	case ranSetup:
		err = r.cfg.Engine.CopyOut(ctx, sb.info.ContainerID, WorkspaceDir, f)
	case w.HostDir != "":
		err = tardir.Write(f, w.HostDir, "")
	default:
		err = tar.NewWriter(f).Close()
	}
	if err != nil {
		return err
	}
	return f.Close()
}

func (r *Runner) register(sb *sandbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sandboxes[sb.info.ID] = sb
}

// reserve holds a caller's id for its create until release: false when a
// sandbox or another create in flight has it, or an id that names the same
// veths (the first ten characters).
func (r *Runner) reserve(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	short := shortID(id)
	for other := range r.sandboxes {
		if shortID(other) == short {
			return false
		}
	}
	for other := range r.reserved {
		if shortID(other) == short {
			return false
		}
	}
	r.reserved[id] = true
	return true
}

func (r *Runner) release(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.reserved, id)
}

func (r *Runner) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// abort removes whatever a failed create left.
func (r *Runner) abort(sb *sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.teardown(ctx, sb); err != nil {
		r.log.Warn("sandbox: cleanup after failed create", "sandbox", sb.info.ID, "err", err)
		r.setPhase(sb.info.ID, phaseDestroyFailed)
		return
	}
	r.mu.Lock()
	delete(r.sandboxes, sb.info.ID)
	r.mu.Unlock()
}

func (r *Runner) startTimer(sb *sandbox) {
	r.startIdle(sb)
	if sb.info.Deadline.IsZero() {
		return
	}
	id := sb.info.ID
	d := sb.info.Deadline.Sub(r.cfg.Now())
	r.mu.Lock()
	defer r.mu.Unlock()
	sb.timer = time.AfterFunc(max(d, 0), func() { r.expire(id) })
}

func (r *Runner) expire(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := r.destroy(ctx, id, "lifetime expired")
	if errors.Is(err, errResetting) { // a reset is replacing its container: end it right after
		time.AfterFunc(time.Second, func() {
			if !r.isClosed() { // closed: the next runner adopts it and its deadline
				r.expire(id)
			}
		})
		return
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		r.log.Warn("sandbox: destroy at end of lifetime", "sandbox", id, "err", err)
	}
}

// caBundle returns the host path of the bundle for an image: the image's
// own roots plus Airlock's CA, content-addressed and shared by sandboxes.
func (r *Runner) caBundle(ctx context.Context, image, imageID string) (string, error) {
	if len(r.cfg.CACertPEM) == 0 {
		return "", nil
	}
	roots, err := r.imageRoots(ctx, image, imageID)
	if err != nil {
		return "", fmt.Errorf("read the CA roots of %s: %w", image, err)
	}
	var b bytes.Buffer
	b.Write(roots)
	if b.Len() > 0 && !bytes.HasSuffix(roots, []byte("\n")) {
		b.WriteByte('\n')
	}
	b.WriteString("# Airlock appliance CA\n")
	b.Write(r.cfg.CACertPEM)
	sum := sha256.Sum256(b.Bytes())
	path := filepath.Join(r.caDir(), hex.EncodeToString(sum[:8])+".pem")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	return path, safefile.WriteAtomic(path, b.Bytes(), 0o644)
}

// imageRoots reads the image's CA bundle once per image ID through a probe
// container that is created, copied from and removed (never started).
func (r *Runner) imageRoots(ctx context.Context, image, imageID string) ([]byte, error) {
	r.mu.Lock()
	roots, ok := r.roots[imageID]
	r.mu.Unlock()
	if ok {
		return roots, nil
	}
	probe := Spec{Name: "airlock-probe-" + r.cfg.NewID(), Image: image, Command: slices.Clone(holdCommand),
		NetworkNone: true, CapDrop: []string{"ALL"}, NoNewPrivileges: true,
		Labels: map[string]string{LabelManaged: "true", LabelInstance: r.cfg.Instance}}
	cid, err := r.cfg.Engine.Create(ctx, probe)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := r.cfg.Engine.Remove(context.WithoutCancel(ctx), cid); err != nil {
			r.log.Warn("sandbox: remove CA probe container", "container", cid, "err", err)
		}
	}()
	var buf bytes.Buffer
	err = r.cfg.Engine.CopyOut(ctx, cid, CABundlePath, &buf)
	switch {
	case errors.Is(err, ErrNotFound):
		roots = []byte{}
	case err != nil:
		return nil, err
	default:
		if roots, err = firstFile(&buf, 8<<20); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	r.roots[imageID] = roots
	r.mu.Unlock()
	return roots, nil
}

// firstFile returns the first regular file of a tar stream (empty if none).
func firstFile(rd io.Reader, limit int64) ([]byte, error) {
	tr := tar.NewReader(rd)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return []byte{}, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if h.Size > limit {
				return nil, fmt.Errorf("%s is %d bytes, more than %d", h.Name, h.Size, limit)
			}
			return io.ReadAll(tr)
		}
	}
}

func imageSummary(sb Sandbox) string {
	s := "image " + sb.Image + " (" + sb.ImageID + ")"
	if sb.Template != "" {
		s += ", template " + sb.Template
	}
	return s
}

func limitSummary(l []LimitReport) string {
	var parts []string
	for _, x := range l {
		state := "in force"
		if !x.InForce {
			state = "not in force: " + x.Reason
		}
		parts = append(parts, fmt.Sprintf("%s=%s (%s)", x.Name, x.Value, state))
	}
	return "limits: " + strings.Join(parts, "; ")
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

func cmpOr[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}
