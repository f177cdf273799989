package runner

import (
	"context"
	"errors"
	"fmt"

	"airlock/audit"
)

// Destroy removes a sandbox: its container, veth (with the host address and
// route), network path (the detach hook), pool address and state. A destroy
// that fails half way leaves the sandbox ending (phase destroy-failed); calling
// Destroy again or Reconcile finishes it.
func (r *Runner) Destroy(ctx context.Context, id string) error {
	return r.destroy(ctx, id, "")
}

func (r *Runner) destroy(ctx context.Context, id, reason string) error {
	r.mu.Lock()
	sb, ok := r.sandboxes[id]
	if ok && sb.info.phase == phasePooled { // not a sandbox yet: the pool recycles it
		ok = false
	}
	if ok && sb.info.phase == phaseDestroying {
		r.mu.Unlock()
		return fmt.Errorf("sandbox %q is already being destroyed: %w", id, ErrState)
	}
	if ok && sb.info.phase == phaseResetting {
		r.mu.Unlock()
		return fmt.Errorf("sandbox %q is being reset; destroy it when the reset is done: %w", id, errResetting)
	}
	retry := false
	if ok {
		retry = sb.info.phase == phaseDestroyFailed
		sb.info.setPhase(phaseDestroying)
		if sb.timer != nil {
			sb.timer.Stop()
		}
		sb.stopIdle()
	}
	r.mu.Unlock()
	if !ok {
		return fmt.Errorf("sandbox %q: %w", id, ErrNotFound)
	}
	if reason == "" {
		reason = "destroyed on request"
	}
	if !retry { // a retry is ending already
		r.lifecycleBy(ctx, sb.info, "ending", reason)
	}
	art := r.exportOnce(ctx, sb, reason)
	if err := r.teardown(ctx, sb); err != nil {
		r.setPhase(id, phaseDestroyFailed)
		r.lifecycleBy(ctx, sb.info, "failed", "destroy: "+err.Error())
		return fmt.Errorf("destroy sandbox %s: %w", id, err)
	}
	r.ended(sb.info, reason, art, audit.PrincipalFrom(ctx)) // before it leaves List
	r.mu.Lock()
	delete(r.sandboxes, id)
	r.mu.Unlock()
	return nil
}

var errResetting = fmt.Errorf("reset in progress: %w", ErrState)

// exportOnce exports a sandbox's artifacts unless an earlier destroy of it
// did (a destroy that failed half way is retried without a second export).
func (r *Runner) exportOnce(ctx context.Context, sb *sandbox, reason string) *Artifacts {
	r.mu.Lock()
	done := sb.exported
	sb.exported = true
	info := sb.info
	r.mu.Unlock()
	if done {
		return nil
	}
	a := r.export(ctx, info, reason)
	return &a
}

// ended emits a sandbox's end record: why, what it changed, where its
// artifacts are, and who ended it ("": the appliance).
func (r *Runner) ended(sb Sandbox, reason string, art *Artifacts, principal string) {
	detail := reason
	var changes []audit.FileChange
	if art != nil {
		detail += "; " + artifactSummary(*art)
		for _, c := range art.Changes {
			changes = append(changes, audit.FileChange{Path: WorkspaceDir + "/" + c.Path, Op: c.Kind, Size: c.Size})
		}
	}
	r.emitLifecycle(sb, "destroyed", detail, changes, principal)
}

// teardown undoes a sandbox step by step, going on after errors: the
// container first (so no process is left behind a path being removed), then
// the veth, then the path, then the address and state.
func (r *Runner) teardown(ctx context.Context, sb *sandbox) error {
	var errs []error
	if cid := sb.info.ContainerID; cid != "" {
		if err := r.cfg.Engine.Remove(ctx, cid); err != nil {
			errs = append(errs, fmt.Errorf("remove container: %w", err))
		}
	} else if err := r.removeByName(ctx, sb.info.ID); err != nil {
		errs = append(errs, err)
	}
	r.mu.Lock()
	a := sb.agent
	sb.agent = nil
	r.mu.Unlock()
	if a != nil {
		a.Close()
	}
	if r.pool != nil {
		if err := r.net.DelLink(VethName(sb.info.ID)); err != nil {
			errs = append(errs, fmt.Errorf("delete veth: %w", err))
		}
	}
	if sb.detach != nil {
		if err := sb.detach(); err != nil {
			errs = append(errs, fmt.Errorf("detach network path: %w", err))
		} else {
			sb.detach = nil
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if sb.info.Address.IsValid() && r.pool != nil {
		r.pool.release(sb.info.Address)
	}
	if err := r.removeState(sb.info.ID); err != nil {
		return fmt.Errorf("remove state: %w", err)
	}
	return nil
}

// removeByName removes a container whose create call may have succeeded on
// the engine even though the runner saw an error.
func (r *Runner) removeByName(ctx context.Context, id string) error {
	cs, err := r.cfg.Engine.List(ctx, map[string]string{LabelInstance: r.cfg.Instance, LabelSandbox: id})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	for _, c := range cs {
		if err := r.cfg.Engine.Remove(ctx, c.ID); err != nil {
			return fmt.Errorf("remove container: %w", err)
		}
	}
	return nil
}
