package runner

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// ReconcileReport says what Reconcile did.
type ReconcileReport struct {
	Adopted  []string `json:"adopted"`  // running sandboxes taken over
	Removed  []string `json:"removed"`  // containers removed (unknown or broken)
	Veths    []string `json:"veths"`    // orphan veths deleted
	Finished []string `json:"finished"` // half-destroyed sandboxes finished
}

// Reconcile brings the host in line with the runner's state, as on a start
// after a crash: running containers of this instance with a complete network
// are adopted (the network hook is called again with Adopted set); other
// labelled containers of this instance are removed; veths tagged for this
// instance with no sandbox are deleted; sandboxes whose destroy failed, or
// whose container has gone, are finished. Each action is an audit event.
func (r *Runner) Reconcile(ctx context.Context) (ReconcileReport, error) {
	var rep ReconcileReport
	cs, err := r.cfg.Engine.List(ctx, map[string]string{LabelManaged: "true", LabelInstance: r.cfg.Instance})
	if err != nil {
		return rep, fmt.Errorf("reconcile: list containers: %w", err)
	}
	var errs []error
	seen := map[string]bool{}
	for _, c := range cs {
		id := c.Labels[LabelSandbox]
		seen[id] = true
		if id != "" && r.known(id) {
			continue
		}
		errs = append(errs, r.reconcileContainer(ctx, c, &rep))
	}
	errs = append(errs, r.finishBroken(ctx, seen, &rep))
	errs = append(errs, r.deleteOrphanVeths(&rep))
	if err := errors.Join(errs...); err != nil {
		return rep, fmt.Errorf("reconcile: %w", err)
	}
	return rep, nil
}

func (r *Runner) known(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.sandboxes[id]
	return ok && sb.info.phase != phaseDestroyFailed
}

func (r *Runner) reconcileContainer(ctx context.Context, c Container, rep *ReconcileReport) error {
	if _, claimed := r.loadClaim(c.Labels[LabelSandbox]); c.Labels[LabelPool] != "" && !claimed {
		return r.removeStaleMember(ctx, c, rep)
	}
	sb, why := r.adoptable(ctx, c)
	if why == "" {
		if err := r.adopt(sb); err == nil {
			rep.Adopted = append(rep.Adopted, sb.info.ID)
			if r.pausedAtStart(sb.info.ID) { // its processes are still stopped, its block still pinned
				r.setPhase(sb.info.ID, phasePaused)
			}
			r.connectAgent(ctx, sb, c.Labels)
			r.lifecycle(sb.info, "adopted", "re-adopted after a restart; commands through "+sb.info.Agent)
			if a := r.agentOf(sb.info.ID); a != nil {
				r.recoverExecs(ctx, sb.info, a)
			}
			return nil
		} else {
			why = err.Error()
		}
	}
	info := labelInfo(c, r.cfg.ExecTimeout)
	var art *Artifacts
	if info.ID != "" {
		a := r.export(ctx, info, "reconcile at restart: "+why)
		art = &a
	}
	if err := r.cfg.Engine.Remove(ctx, c.ID); err != nil {
		return fmt.Errorf("remove container %s: %w", c.Name, err)
	}
	rep.Removed = append(rep.Removed, c.Name)
	r.lifecycle(info, "reconciled", "removed container "+c.Name+": "+why)
	if art != nil {
		r.ended(info, "reconcile at restart: "+why, art, "")
	}
	if info.ID != "" && r.pool != nil {
		if err := r.net.DelLink(VethName(info.ID)); err != nil {
			return err
		}
		r.removeState(info.ID)
	}
	return nil
}

// adoptable rebuilds a sandbox from a container's labels, or says why it
// cannot be adopted.
func (r *Runner) adoptable(ctx context.Context, c Container) (*sandbox, string) {
	l := c.Labels
	id := l[LabelSandbox]
	if id == "" {
		return nil, "not a sandbox (a leftover probe)"
	}
	ci, err := r.cfg.Engine.Inspect(ctx, c.ID)
	if err != nil || !ci.Running {
		if err == nil {
			return nil, fmt.Sprintf("not running (exit code %d)", ci.ExitCode)
		}
		return nil, "not running"
	}
	sb := &sandbox{info: labelInfo(c, r.cfg.ExecTimeout)}
	if cl, ok := r.loadClaim(id); ok && l[LabelPool] != "" { // a claimed warm member
		applyClaim(sb, cl)
	}
	if r.pool == nil {
		if l[LabelAddress] != "" {
			return nil, "it has a network address but this runner has no network hook"
		}
		return sb, ""
	}
	addr, err := netip.ParseAddr(l[LabelAddress])
	if err != nil {
		return nil, "no network address label"
	}
	sb.info.Address, sb.info.Gateway, sb.info.HostIf = addr, r.pool.gw, VethName(id)
	return sb, ""
}

// removeStaleMember removes an unclaimed warm member a previous process
// left: nothing ran in it, so nothing is exported; the pool makes a new
// one.
func (r *Runner) removeStaleMember(ctx context.Context, c Container, rep *ReconcileReport) error {
	id := c.Labels[LabelSandbox]
	if err := r.cfg.Engine.Remove(ctx, c.ID); err != nil {
		return fmt.Errorf("remove warm member %s: %w", c.Name, err)
	}
	rep.Removed = append(rep.Removed, c.Name)
	info := labelInfo(c, r.cfg.ExecTimeout)
	r.lifecycle(info, "recycled", "warm pool member removed unclaimed: left by a previous appliance, removed at restart")
	if r.pool != nil && id != "" {
		if err := r.net.DelLink(VethName(id)); err != nil {
			return err
		}
	}
	if validID(id) {
		r.removeState(id)
	}
	return nil
}

// labelInfo rebuilds what the labels of a sandbox's container say about it.
func labelInfo(c Container, execTimeout time.Duration) Sandbox {
	l := c.Labels
	created, _ := time.Parse(time.RFC3339Nano, l[LabelCreated])
	info := Sandbox{ID: l[LabelSandbox], ContainerID: c.ID, Image: l[LabelImage], Policy: l[LabelPolicy], Created: created,
		Adopted: true, ReadOnly: l[LabelReadOnly] == "true", ExecTimeout: execTimeout,
		Outputs: parseOutputs(l[LabelOutputs]), ImageID: l[LabelImageID], Template: l[LabelTemplate]}
	info.setPhase(phaseRunning)
	if a, err := netip.ParseAddr(l[LabelAddress]); err == nil {
		info.Address = a
	}
	if d, err := time.ParseDuration(l[LabelExecLimit]); err == nil {
		info.ExecTimeout = d
	}
	if c := l[LabelCapAdd]; c != "" {
		info.CapAdd, _ = NormalizeCapAdd(strings.Split(c, ","))
	}
	if t, err := time.Parse(time.RFC3339Nano, l[LabelDeadline]); err == nil {
		info.Deadline = t
	}
	if d, err := time.ParseDuration(l[LabelIdle]); err == nil && d > 0 {
		info.IdleTimeout = d
	}
	if mode, dir, ok := strings.Cut(l[LabelWorkspace], ":"); ok {
		info.Workspace = Workspace{HostDir: dir, Mode: WorkspaceMode(mode)}
	}
	return info
}

// adopt registers sb, claims its address and re-attaches its network path.
func (r *Runner) adopt(sb *sandbox) error {
	if r.pool != nil {
		idx, err := r.net.Index(sb.info.HostIf)
		if err != nil {
			return fmt.Errorf("its veth is gone: %w", err)
		}
		sb.ifindex = idx
		if err := r.pool.claim(sb.info.Address); err != nil {
			return err
		}
		n := SandboxNet{SandboxID: sb.info.ID, Policy: sb.info.Policy, HostIfName: sb.info.HostIf,
			HostIfIndex: idx, Addr: sb.info.Address, MAC: PeerMAC(sb.info.Address), Gateway: sb.info.Gateway, Adopted: true}
		detach, err := r.cfg.AttachNetwork(idx, n)
		if err != nil {
			r.pool.release(sb.info.Address)
			return fmt.Errorf("re-attach the network path: %w", err)
		}
		sb.detach = detach
	}
	r.register(sb)
	r.startTimer(sb)
	return nil
}

// finishBroken finishes sandboxes whose destroy failed and forgets those
// whose container disappeared.
func (r *Runner) finishBroken(ctx context.Context, seen map[string]bool, rep *ReconcileReport) error {
	var todo, gone []*sandbox
	r.mu.Lock()
	for id, sb := range r.sandboxes {
		if sb.info.phase == phaseDestroyFailed || (!seen[id] && sb.info.phase == phaseRunning) {
			todo = append(todo, sb)
		}
		if sb.info.phase == phaseRunning && !seen[id] {
			sb.info.setPhase(phaseDestroying)
			gone = append(gone, sb)
		}
	}
	r.mu.Unlock()
	for _, sb := range gone {
		r.lifecycle(sb.info, "ending", "finished by reconcile: its container is gone")
	}
	var errs []error
	for _, sb := range todo {
		art := r.exportOnce(ctx, sb, "finished by reconcile")
		if err := r.teardown(ctx, sb); err != nil {
			r.setPhase(sb.info.ID, phaseDestroyFailed)
			errs = append(errs, fmt.Errorf("finish sandbox %s: %w", sb.info.ID, err))
			continue
		}
		r.ended(sb.info, "finished by reconcile", art, "")
		r.mu.Lock()
		delete(r.sandboxes, sb.info.ID)
		r.mu.Unlock()
		rep.Finished = append(rep.Finished, sb.info.ID)
	}
	return errors.Join(errs...)
}

// deleteOrphanVeths deletes veths tagged for this instance whose sandbox is
// not known. Veths of other instances are left alone.
func (r *Runner) deleteOrphanVeths(rep *ReconcileReport) error {
	links, err := r.net.Links(VethPrefix)
	if err != nil {
		return fmt.Errorf("list veths: %w", err)
	}
	mine := "airlock:" + r.cfg.Instance + ":"
	var errs []error
	for name, alias := range links {
		id, ok := strings.CutPrefix(alias, mine)
		if !ok || r.known(id) {
			continue
		}
		if err := r.net.DelLink(name); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Veths = append(rep.Veths, name)
		r.lifecycle(Sandbox{ID: id}, "reconciled", "deleted orphan veth "+name)
	}
	return errors.Join(errs...)
}
