package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"airlock/internal/safefile"
)

// claimRecord is what a claim bound to a warm member, kept in its state
// directory: the container's labels still say "unclaimed member", so a
// restarted runner adopts a claimed member from this record.
type claimRecord struct {
	Policy      string            `json:"policy"`
	Env         map[string]string `json:"env,omitempty"`
	Workspace   Workspace         `json:"workspace"`
	Outputs     []string          `json:"outputs,omitempty"`
	ExecTimeout time.Duration     `json:"exec_timeout"`
	Deadline    time.Time         `json:"deadline,omitzero"`
	IdleTimeout time.Duration     `json:"idle_timeout,omitempty"`
	Created     time.Time         `json:"created"`
	PooledAt    time.Time         `json:"pooled_at"`
}

func (r *Runner) claimPath(id string) string {
	return filepath.Join(r.sandboxesDir(), id, "claim.json")
}

func (r *Runner) loadClaim(id string) (claimRecord, bool) {
	var c claimRecord
	b, err := os.ReadFile(r.claimPath(id))
	if err != nil || json.Unmarshal(b, &c) != nil {
		return c, false
	}
	return c, true
}

// tryClaim serves a create from a warm pool when one matches: it returns
// ok false (a miss, or no pools) and the cold path runs instead.
func (r *Runner) tryClaim(ctx context.Context, req CreateRequest, tmpl string) (Sandbox, bool, error) {
	w := r.warmPools()
	if w == nil {
		return Sandbox{}, false, nil
	}
	key, why := matchWarm(req, tmpl)
	if key == "" {
		w.mu.Lock()
		w.stats.Misses++
		w.mu.Unlock()
		r.log.Debug("warm pool: miss", "reason", why)
		return Sandbox{}, false, nil
	}
	sb := w.take(key, w.cfg.MaxAge, r.cfg.Now())
	if sb == nil {
		return Sandbox{}, false, nil
	}
	info, err := r.claim(ctx, sb, req)
	w.wake() // after the claim: the refill's engine calls never compete with it
	return info, true, err
}

// claim binds a create to a member: policy, address (the kernel path's
// identity and the registry), env, task secrets (CreateRequest.OnID),
// workspace and setup, all without the engine when there are no setup
// commands. On failure the member is removed like a failed create.
func (r *Runner) claim(ctx context.Context, sb *sandbox, req CreateRequest) (Sandbox, error) {
	start := time.Now()
	now := r.cfg.Now().UTC()
	pooledAt := sb.info.Created
	rec := claimRecord{Policy: req.Policy, Env: maps.Clone(req.Env), Workspace: req.Workspace,
		Outputs: slices.Clone(req.Outputs), ExecTimeout: cmpOr(req.ExecTimeout, r.cfg.ExecTimeout), Created: now, PooledAt: pooledAt,
		IdleTimeout: max(req.IdleTimeout, 0)}
	if req.Lifetime > 0 {
		rec.Deadline = now.Add(req.Lifetime)
	}
	r.mu.Lock()
	applyClaim(sb, rec)
	sb.info.setPhase(phaseCreating)
	r.mu.Unlock()
	if err := r.bindClaim(ctx, sb, req, rec); err != nil {
		r.abort(sb)
		r.lifecycleBy(ctx, sb.info, "failed", "claim of a warm member: "+err.Error())
		return Sandbox{}, fmt.Errorf("create sandbox %s (warm member): %w", sb.info.ID, err)
	}
	r.mu.Lock()
	ready := sb.info.phase == phaseCreating // not if a Destroy raced in
	if ready {
		sb.info.setPhase(phaseRunning)
	}
	info := sb.info
	r.mu.Unlock()
	if ready {
		r.lifecycleBy(ctx, info, "claimed", fmt.Sprintf("warm pool member made %s ago, claimed in %s; %s",
			now.Sub(pooledAt).Round(time.Millisecond), time.Since(start).Round(time.Microsecond), imageSummary(info)))
	}
	r.startTimer(sb)
	return info, nil
}

// applyClaim puts a claim's values on a member (r.mu held).
func applyClaim(sb *sandbox, c claimRecord) {
	sb.info.Policy, sb.info.Workspace, sb.info.Outputs = c.Policy, c.Workspace, c.Outputs
	sb.info.ExecTimeout, sb.info.Deadline, sb.info.Created = c.ExecTimeout, c.Deadline, c.Created
	sb.info.IdleTimeout = c.IdleTimeout
	sb.env = c.Env
	sb.claimed = true
}

func (r *Runner) bindClaim(ctx context.Context, sb *sandbox, req CreateRequest, rec claimRecord) error {
	id := sb.info.ID
	if req.OnID != nil {
		if err := req.OnID(id); err != nil {
			return err
		}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := safefile.WriteAtomic(r.claimPath(id), b, 0o600); err != nil {
		return fmt.Errorf("keep the claim: %w", err)
	}
	if err := r.saveClaimRecipe(ctx, sb, req); err != nil {
		return fmt.Errorf("keep the create recipe: %w", err)
	}
	if err := r.prepareWorkspace(req.Workspace); err != nil {
		return err
	}
	if err := r.bindNetwork(sb); err != nil {
		return err
	}
	return r.provision(ctx, sb, req)
}

// saveClaimRecipe keeps the spec a cold create of this request would have
// made, with the member's id and address: a reset makes that container.
func (r *Runner) saveClaimRecipe(ctx context.Context, sb *sandbox, req CreateRequest) error {
	i := sb.info
	ca, err := r.caBundle(ctx, req.Image, i.ImageID) // cached since the member was made
	if err != nil {
		return err
	}
	in := SpecInput{ImageID: i.ImageID, Template: i.Template, Instance: r.cfg.Instance, ID: i.ID, Req: req,
		Created: i.Created, Deadline: i.Deadline, ExecTimeout: i.ExecTimeout, Cgroups: r.cgroups, ProxyURL: r.cfg.ProxyURL,
		AgentDir: r.agentDir, Address: i.Address, Gateway: i.Gateway, ResolvConf: r.resolvConf(), CABundle: ca}
	return r.saveRecipe(i.ID, recipe{Spec: BuildSpec(in), Setup: req.Setup, ImageID: i.ImageID})
}

// bindNetwork gives a member its identity: the network hook again, now
// with the policy, so the kernel path learns the address and the registry
// the sandbox. The bound detach replaces the unbound one.
func (r *Runner) bindNetwork(sb *sandbox) error {
	i := sb.info
	n := SandboxNet{SandboxID: i.ID, Policy: i.Policy, HostIfName: i.HostIf, HostIfIndex: sb.ifindex,
		Addr: i.Address, MAC: PeerMAC(i.Address), Gateway: i.Gateway}
	detach, err := r.cfg.AttachNetwork(sb.ifindex, n)
	if err != nil {
		return fmt.Errorf("network: bind the path to %s: %w", i.HostIf, err)
	}
	sb.detach = detach
	return nil
}

// claimEnv is the environment a claim bound, added to every command.
func (r *Runner) claimEnv(id string, extra map[string]string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.sandboxes[id]
	if !ok || len(sb.env) == 0 {
		return extra
	}
	env := maps.Clone(sb.env)
	maps.Copy(env, extra)
	return env
}
