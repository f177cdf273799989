package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"airlock/internal/safefile"
)

// ResetResult says what a reset replaced.
type ResetResult struct {
	Sandbox      Sandbox       `json:"sandbox"`
	OldContainer string        `json:"old_container"`
	NewContainer string        `json:"new_container"`
	ImageID      string        `json:"image_id"` // the image both came from
	Duration     time.Duration `json:"duration"`
}

// recipe is what Reset needs to make a sandbox's container again, kept in
// its state directory (so it survives a restart of the appliance).
type recipe struct {
	Spec    Spec       `json:"spec"`
	Setup   [][]string `json:"setup,omitempty"`
	ImageID string     `json:"image_id"`
}

func (r *Runner) recipePath(id string) string {
	return filepath.Join(r.sandboxesDir(), id, "recipe.json")
}

func (r *Runner) saveRecipe(id string, rc recipe) error {
	b, err := json.Marshal(rc)
	if err != nil {
		return err
	}
	return safefile.WriteAtomic(r.recipePath(id), b, 0o600)
}

func (r *Runner) loadRecipe(id string) (recipe, error) {
	var rc recipe
	b, err := os.ReadFile(r.recipePath(id))
	if err != nil {
		return rc, fmt.Errorf("reset %s: its create recipe is not kept (created by an older appliance?): %w", id, ErrUnsupported)
	}
	if err := json.Unmarshal(b, &rc); err != nil {
		return rc, fmt.Errorf("reset %s: recipe: %w", id, err)
	}
	return rc, nil
}

// Reset returns a sandbox to the state it was created in: a new container
// from the same image and spec, on the same veth name, address, policy and
// network identity, with the workspace re-mounted (bind) or copied in again
// (copy) and the setup commands run again. Everything written in the old
// container is gone. The lifecycle event "reset" names the old and new
// containers and the image. A reset that fails half way destroys the
// sandbox (with its artifacts): it is never left half made.
func (r *Runner) Reset(ctx context.Context, id string) (ResetResult, error) {
	start := time.Now()
	r.mu.Lock()
	sb, ok := r.sandboxes[id]
	if !ok || sb.info.phase != phaseRunning {
		r.mu.Unlock()
		if !ok {
			return ResetResult{}, fmt.Errorf("reset: sandbox %q: %w", id, ErrNotFound)
		}
		return ResetResult{}, fmt.Errorf("reset: sandbox %q is %s: %w", id, sb.info.phase, ErrState)
	}
	rc, err := r.loadRecipe(id)
	if err != nil {
		r.mu.Unlock()
		return ResetResult{}, err
	}
	sb.info.setPhase(phaseResetting)
	old := sb.info.ContainerID
	a := sb.agent
	sb.agent = nil
	r.mu.Unlock()
	if a != nil {
		a.Close()
	}
	if err := r.replace(ctx, sb, rc); err != nil {
		r.lifecycleBy(ctx, sb.info, "failed", "reset: "+err.Error())
		r.setPhase(id, phaseRunning)
		if derr := r.destroy(context.WithoutCancel(ctx), id, "reset failed: "+err.Error()); derr != nil {
			r.log.Warn("sandbox: destroy after a failed reset", "sandbox", id, "err", derr)
		}
		return ResetResult{}, fmt.Errorf("reset sandbox %s: %w", id, err)
	}
	r.mu.Lock()
	if sb.info.phase == phaseResetting {
		sb.info.setPhase(phaseRunning)
	}
	res := ResetResult{Sandbox: sb.info, OldContainer: old, NewContainer: sb.info.ContainerID, ImageID: rc.ImageID}
	r.mu.Unlock()
	res.Duration = time.Since(start)
	r.lifecycleBy(ctx, res.Sandbox, "reset", fmt.Sprintf("container %s -> %s; image %s (%s); address %s kept; took %s",
		short(old), short(res.NewContainer), res.Sandbox.Image, rc.ImageID, res.Sandbox.Address, res.Duration.Round(time.Millisecond)))
	return res, nil
}

// replace removes the old container (its netns, and so its veth, go with
// it) and makes the new one as Create does.
func (r *Runner) replace(ctx context.Context, sb *sandbox, rc recipe) error {
	if err := r.cfg.Engine.Remove(ctx, sb.info.ContainerID); err != nil {
		return fmt.Errorf("remove the old container: %w", err)
	}
	if sb.detach != nil {
		if err := sb.detach(); err != nil {
			return fmt.Errorf("detach the old network path: %w", err)
		}
		sb.detach = nil
	}
	if r.pool != nil {
		if err := r.net.DelLink(VethName(sb.info.ID)); err != nil {
			return fmt.Errorf("delete the old veth: %w", err)
		}
	}
	if err := r.prepareWorkspace(sb.info.Workspace); err != nil {
		return err
	}
	cid, err := r.cfg.Engine.Create(ctx, rc.Spec)
	if err != nil {
		return fmt.Errorf("create container: %w", err)
	}
	r.update(sb, func(i *Sandbox) { i.ContainerID = cid })
	if err := r.cfg.Engine.Start(ctx, cid); err != nil {
		return fmt.Errorf("start container: %w", err)
	}
	if err := r.plumb(ctx, sb); err != nil {
		return err
	}
	r.connectAgent(ctx, sb, rc.Spec.Labels)
	return r.provision(ctx, sb, CreateRequest{Workspace: sb.info.Workspace, Setup: rc.Setup})
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
