package serve

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"airlock/audit"
	"airlock/client"
	"airlock/internal/randid"
	"airlock/runner"
)

var _ Backend = (*Appliance)(nil)

// apiError maps the runner's sentinel errors to API codes.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	var ae *client.Error
	switch {
	case errors.As(err, &ae):
		return err
	case errors.Is(err, runner.ErrNotFound):
		return client.Errorf(client.CodeNotFound, "%v", err)
	case errors.Is(err, runner.ErrUnsupported):
		return client.Errorf(client.CodeUnsupported, "%v", err)
	case errors.Is(err, runner.ErrInvalid):
		return client.Errorf(client.CodeInvalid, "%v", err)
	case errors.Is(err, runner.ErrClosed):
		return client.Errorf(client.CodeUnavailable, "%v", err)
	case errors.Is(err, runner.ErrState):
		return client.Errorf(client.CodeConflict, "%v", err)
	}
	return err
}

// Health reports each component.
func (a *Appliance) Health(context.Context) client.Health {
	h := client.Health{Status: "ok", Version: a.opts.Version, Sandboxes: len(a.runner.List()),
		Components: map[string]string{"dns": "ok", "proxy": "ok", "kernel_path": "ok", "runner": "ok", "audit": "ok"}}
	if st := a.pipeline.Stats(); st.Failing {
		h.Status, h.Components["audit"] = "degraded", "a sink is failing; writes are being retried"
	}
	return h
}

// Create makes a sandbox under a policy, with its task secrets held here.
func (a *Appliance) Create(ctx context.Context, req client.CreateRequest) (client.Sandbox, error) {
	if len(a.runner.List()) >= a.cfg.Sandbox.Max {
		return client.Sandbox{}, client.Errorf(client.CodeQuotaExceeded,
			"the appliance runs its maximum of %d sandboxes (sandbox.max): remove some with `airlock sandbox rm`", a.cfg.Sandbox.Max)
	}
	name := req.Policy
	if name == "" {
		name = a.cfg.DefaultPolicy
	}
	if name == "" {
		return client.Sandbox{}, client.Errorf(client.CodeInvalid, "no policy given and no default_policy configured: pass --policy NAME")
	}
	ref, ok := a.policies.Get(name)
	if !ok {
		return client.Sandbox{}, client.Errorf(client.CodeInvalid, "policy %q is not loaded (see `airlock policy list`; files live in %s)", name, a.cfg.PolicyDir)
	}
	rr, placeholders, err := a.runnerRequest(req, name, ref)
	if err != nil {
		return client.Sandbox{}, err
	}
	lock, err := parseLockfiles(req.Lockfiles)
	if err != nil {
		return client.Sandbox{}, err
	}
	sb, err := a.createWithSecrets(ctx, rr, req.Secrets, placeholders, lock)
	if err != nil {
		return client.Sandbox{}, explainClone(err, req)
	}
	return a.describe(sb), nil
}

// createWithSecrets registers the task secrets and sentinel placeholders
// under the sandbox's id before runner.Create starts it, so its setup
// commands can already use them through the proxy, and drops them again
// when the create fails.
func (a *Appliance) createWithSecrets(ctx context.Context, rr runner.CreateRequest, task, placeholders map[string]string, lock *sandboxLock) (runner.Sandbox, error) {
	id := randid.Hex(6)
	if _, err := a.secrets.SetTask(id, task, nil); err != nil {
		return runner.Sandbox{}, client.Errorf(client.CodeInvalid, "%v", err)
	}
	a.secrets.setPlaceholders(id, placeholders)
	rr.ID = id
	if err := a.sbLocks.set(id, lock); err != nil {
		a.secrets.Forget(id)
		a.sbLocks.forget(id)
		return runner.Sandbox{}, err
	}
	rr.OnID = func(member string) error { // a warm member keeps its id: the secrets move to it before it runs anything
		a.secrets.Forget(id)
		if err := a.sbLocks.move(id, member); err != nil {
			return err
		}
		id = member
		if _, err := a.secrets.SetTask(id, task, nil); err != nil {
			return client.Errorf(client.CodeInvalid, "%v", err)
		}
		a.secrets.setPlaceholders(id, placeholders)
		return nil
	}
	sb, err := a.runner.Create(ctx, rr)
	if err != nil {
		a.secrets.Forget(id)
		a.sbLocks.forget(id)
		return runner.Sandbox{}, apiError(err)
	}
	return sb, nil
}

func (a *Appliance) runnerRequest(req client.CreateRequest, policy string, ref *policyRef) (runner.CreateRequest, map[string]string, error) {
	image := req.Image
	if image == "" {
		image = a.cfg.Sandbox.Image
	}
	env := map[string]string{}
	for k, v := range req.Env {
		env[k] = v
	}
	placeholders := map[string]string{}
	for _, c := range ref.load().Categories() {
		for _, n := range c.Sentinels {
			if _, ok := placeholders[n]; !ok {
				placeholders[n] = "airlock-placeholder-" + randid.Hex(12)
				env[envName(n)] = placeholders[n]
			}
		}
	}
	for n := range req.Secrets {
		if !secretName.MatchString(n) {
			return runner.CreateRequest{}, nil, client.Errorf(client.CodeInvalid, "secret name %q: use letters, digits, '_', '-', '.'", n)
		}
	}
	rr := runner.CreateRequest{
		Image: image, Policy: policy, Env: env, Setup: req.Setup,
		ExecTimeout: time.Duration(req.ExecTimeout), Lifetime: time.Duration(req.Lifetime),
		ReadOnlyRoot: req.ReadOnly, CapAdd: req.CapAdd, Outputs: req.Outputs, Template: req.Template,
	}
	if rr.Lifetime == 0 {
		rr.Lifetime = a.cfg.Sandbox.Lifetime.Duration
	}
	rr.IdleTimeout = cmp.Or(time.Duration(req.IdleTimeout), a.cfg.Sandbox.IdleTimeout.Duration)
	if req.Workspace != "" { // the runner checks the path and the mode
		rr.Workspace = runner.Workspace{HostDir: req.Workspace, Mode: cmp.Or(runner.WorkspaceMode(req.WorkspaceMode), runner.WorkspaceBind)}
	}
	if req.WorkspaceGit != "" {
		if err := gitWorkspace(&rr, req); err != nil {
			return rr, nil, err
		}
	}
	return rr, placeholders, nil
}

// gitWorkspace makes cloning req.WorkspaceGit the first setup step: it
// runs inside the sandbox, so the proxy decides it under the sandbox's
// policy like any other request, and logs it.
func gitWorkspace(rr *runner.CreateRequest, req client.CreateRequest) error {
	if req.Workspace != "" {
		return client.Errorf(client.CodeInvalid, "give workspace (a host directory) or workspace_git (a URL), not both")
	}
	if err := client.ValidateGitURL(req.WorkspaceGit); err != nil {
		return err
	}
	if _, ok := rr.Env["GIT_TERMINAL_PROMPT"]; !ok {
		rr.Env["GIT_TERMINAL_PROMPT"] = "0" // fail, never wait for a password
	}
	rr.Setup = append([][]string{client.GitCloneArgv(req.WorkspaceGit)}, rr.Setup...)
	return nil
}

// explainClone turns a failure of the clone step (setup command 0) into an
// error naming the URL and carrying git's output.
func explainClone(err error, req client.CreateRequest) error {
	var se *runner.SetupError
	if req.WorkspaceGit == "" || !errors.As(err, &se) || se.Index != 0 {
		return err
	}
	return client.Errorf(client.CodeInvalid,
		"workspace_git: cloning %s failed inside the sandbox (the clone goes through the proxy: the policy must allow the host, "+
			"see `airlock logs --sandbox ID --verdict deny`; the image needs git): %v", req.WorkspaceGit, err)
}

func (a *Appliance) describe(sb runner.Sandbox) client.Sandbox {
	out := client.Sandbox{ID: sb.ID, Image: sb.Image, Policy: sb.Policy, State: sb.State, Agent: sb.Agent,
		ImageID: sb.ImageID, Template: sb.Template,
		Created: sb.Created, Deadline: sb.Deadline, IdleTimeout: client.Duration(sb.IdleTimeout), Workspace: sb.Workspace.HostDir, Secrets: a.secrets.TaskNames(sb.ID)}
	if sb.Address.IsValid() {
		out.Address = sb.Address.String()
	}
	if ref, ok := a.policies.Get(sb.Policy); ok {
		out.PolicyHash = ref.load().Hash()
	}
	for _, l := range sb.Limits {
		if l.InForce {
			out.Limits = append(out.Limits, l.Name+"="+l.Value)
		} else if l.Requested {
			out.Warnings = append(out.Warnings, "limit "+l.Name+" not in force: "+l.Reason)
		}
	}
	if sb.Adopted {
		out.Labels = map[string]string{"adopted": "true"}
	}
	var warn string
	if out.Lockfiles, warn = a.sbLocks.describe(sb.ID); warn != "" {
		out.Warnings = append(out.Warnings, warn)
	}
	return out
}

// List returns every sandbox, oldest first.
func (a *Appliance) List(context.Context) ([]client.Sandbox, error) {
	sbs := a.runner.List()
	out := make([]client.Sandbox, 0, len(sbs))
	for _, sb := range sbs {
		out = append(out, a.describe(sb))
	}
	return out, nil
}

// Get returns one sandbox.
func (a *Appliance) Get(_ context.Context, id string) (client.Sandbox, error) {
	sb, err := a.runner.Get(id)
	if err != nil {
		return client.Sandbox{}, apiError(err)
	}
	return a.describe(sb), nil
}

// Delete destroys a sandbox (the runner emits the lifecycle event).
func (a *Appliance) Delete(ctx context.Context, id string) error {
	return apiError(a.runner.Destroy(ctx, id))
}

// Exec runs a command, streaming its output.
func (a *Appliance) Exec(ctx context.Context, id string, req client.ExecRequest, stdout, stderr io.Writer) (client.ExecResult, error) {
	rr := runner.ExecRequest{Argv: req.Argv, Shell: req.Shell, User: req.User, Cwd: req.Cwd, Env: req.Env,
		Stdout: stdout, Stderr: stderr, Timeout: time.Duration(req.Timeout), Background: req.Background}
	if len(req.Stdin) > 0 {
		rr.Stdin = bytes.NewReader(req.Stdin)
	}
	res, err := a.runner.Exec(ctx, id, rr)
	if err != nil {
		return client.ExecResult{}, apiError(err)
	}
	return execResult(res), nil
}

// CopyIn unpacks a tar stream into dir in the sandbox.
func (a *Appliance) CopyIn(ctx context.Context, id, dir string, tar io.Reader) error {
	return apiError(a.runner.CopyIn(ctx, id, dir, tar))
}

// CopyOut writes path from the sandbox as a tar stream.
func (a *Appliance) CopyOut(ctx context.Context, id, path string, w io.Writer) error {
	return apiError(a.runner.CopyOut(ctx, id, path, w))
}

// Pause stops a sandbox: its network cut in the kernel, its processes stopped.
func (a *Appliance) Pause(ctx context.Context, id string) error {
	return apiError(a.runner.Pause(ctx, id))
}

// Resume continues a paused sandbox and restores its network.
func (a *Appliance) Resume(ctx context.Context, id string) error {
	return apiError(a.runner.Resume(ctx, id))
}

// Snapshot commits a sandbox to a local image.
func (a *Appliance) Snapshot(ctx context.Context, id string) (client.Snapshot, error) {
	s, err := a.runner.Snapshot(ctx, id)
	if err != nil {
		return client.Snapshot{}, apiError(err)
	}
	return client.Snapshot{Image: s.Image, Warning: s.Warning}, nil
}

// Diff lists what changed under /workspace.
func (a *Appliance) Diff(ctx context.Context, id string) (client.Diff, error) {
	d, err := a.runner.Diff(ctx, id)
	if err != nil {
		return client.Diff{}, apiError(err)
	}
	out := client.Diff{Patch: d.Patch}
	for _, c := range d.Changes {
		out.Changes = append(out.Changes, client.FileChange{Path: c.Path, Change: c.Kind})
	}
	return out, nil
}

// Summary is a sandbox's egress so far (also after it was destroyed, while
// the appliance runs).
func (a *Appliance) Summary(_ context.Context, id string) (client.Summary, error) {
	s := a.tap.Summary(id)
	if _, err := a.runner.Get(id); err != nil && len(s.Counts) == 0 {
		return s, client.Errorf(client.CodeNotFound, "no sandbox %q", id)
	}
	s.Report = reportHint(a.cfg.StateDir, id)
	return s, nil
}

// reportHint is the command that writes sandbox id's report: with
// --state-dir unless the store is in the default state directory, where
// `airlock report` looks without it.
func reportHint(stateDir, id string) string {
	if filepath.Clean(stateDir) == DefaultStateDir {
		return "airlock report " + id
	}
	return "airlock report --state-dir " + shellWord(stateDir) + " " + id
}

// shellWord quotes s for a POSIX shell when it needs it.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+,:@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Policies lists the loaded policies.
func (a *Appliance) Policies(context.Context) ([]client.PolicyInfo, error) {
	return a.policies.List(), nil
}

// ReloadPolicies re-reads the policy directory. When a policy changed,
// open spliced tunnels are decided again under the new versions and those
// now denied are closed (inspected tunnels decide each request anyway).
func (a *Appliance) ReloadPolicies(_ context.Context, by string) (client.ReloadResult, error) {
	res, err := a.policies.Reload(by)
	a.reloadAdvisories(&res)
	if err != nil || len(res.Reloaded) == 0 || a.proxy == nil {
		return res, err
	}
	res.ClosedTunnels = a.proxy.Redecide()
	if res.ClosedTunnels > 0 {
		a.log.Info("policy reload closed open tunnels the new policy denies", "closed", res.ClosedTunnels)
	}
	return res, nil
}

// Logs queries the audit store.
func (a *Appliance) Logs(ctx context.Context, q client.LogQuery, fn func(audit.Event) error) error {
	st := a.pipeline.Store()
	if st == nil {
		return client.Errorf(client.CodeUnavailable, "this appliance keeps no event store (audit.store)")
	}
	if err := a.pipeline.Flush(ctx); err != nil {
		return err
	}
	return st.Each(ctx, q, fn)
}

// followPoll is how often a followed log checks the store for new events.
const followPoll = 250 * time.Millisecond

// FollowLogs streams new events from the audit store as they are written.
func (a *Appliance) FollowLogs(ctx context.Context, q client.LogQuery, fn func(audit.Event) error) error {
	st := a.pipeline.Store()
	if st == nil {
		return client.Errorf(client.CodeUnavailable, "this appliance keeps no event store (audit.store)")
	}
	if q.AfterSeq == 0 {
		n, err := st.MaxSeq(ctx)
		if err != nil {
			return err
		}
		q.AfterSeq = n
	}
	return st.Follow(ctx, q, followPoll, fn)
}

// Approvals lists held requests and recent decisions.
func (a *Appliance) Approvals(context.Context) ([]client.Approval, error) {
	out := a.approvals.List()
	sort.SliceStable(out, func(i, j int) bool { return out[i].State == "held" && out[j].State != "held" })
	return out, nil
}

// Decide applies a human decision.
func (a *Appliance) Decide(_ context.Context, id string, d client.Decision, by string) (client.Approval, error) {
	return a.approvals.Decide(id, d, by)
}
