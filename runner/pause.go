package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"airlock/internal/safefile"
)

// freezer stops and continues the processes of a sandbox (procFreezer;
// tests use a fake).
type freezer interface {
	// Stop sends SIGSTOP to every process in the PID namespace of initPid
	// but initPid itself (the agent, which must keep answering), until no
	// new one appears and all are stopped; it returns their host PIDs.
	Stop(initPid int) ([]int, error)
	// Cont sends SIGCONT to pids.
	Cont(pids []int) error
}

// pauseRecord is kept in the sandbox's state directory while it is paused,
// so a restarted runner knows (the processes stay stopped and the kernel
// block stays pinned across a restart).
type pauseRecord struct {
	Pids []int     `json:"pids"`
	At   time.Time `json:"at"`
}

func (r *Runner) pausePath(id string) string {
	return filepath.Join(r.sandboxesDir(), id, "paused.json")
}

// Pause stops a sandbox without cgroup freezing, so it works on every host:
// first its network is cut in the kernel (Config.BlockNetwork: every packet
// dropped), then every process but its PID 1 gets SIGSTOP. Commands are
// refused while it is paused. The lifecycle event "paused" says both.
func (r *Runner) Pause(ctx context.Context, id string) error {
	sb, err := r.running(id)
	if err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	if r.pool != nil && r.cfg.BlockNetwork == nil {
		return fmt.Errorf("pause sandbox %s: cutting its network needs the kernel path's block (no BlockNetwork hook): %w", id, ErrUnsupported)
	}
	pid, err := r.initPid(ctx, id, sb.ContainerID)
	if err != nil {
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	r.setPhase(id, phasePaused) // from here on no command starts
	if err := r.blockNet(id, true); err != nil {
		return r.pauseFailed(ctx, sb, fmt.Errorf("pause sandbox %s: cut its network: %w", id, err))
	}
	pids, err := r.freezer().Stop(pid)
	if err != nil {
		errs := []error{err, r.freezer().Cont(pids), r.blockNet(id, false)}
		return r.pauseFailed(ctx, sb, fmt.Errorf("pause sandbox %s: stop its processes: %w", id, errors.Join(errs...)))
	}
	b, _ := json.Marshal(pauseRecord{Pids: pids, At: r.cfg.Now().UTC()})
	if err := safefile.WriteAtomic(r.pausePath(id), b, 0o600); err != nil {
		r.log.Warn("pause: keep the record", "sandbox", id, "err", err)
	}
	r.lifecycleBy(ctx, sb, "paused", fmt.Sprintf("network cut in the kernel (every packet dropped); %d processes stopped with SIGSTOP (PID 1, the agent, keeps answering)", len(pids)))
	return nil
}

// pauseFailed puts a sandbox whose pause failed back to running: a
// record says so, with why.
func (r *Runner) pauseFailed(ctx context.Context, sb Sandbox, err error) error {
	r.setPhase(sb.ID, phaseRunning)
	r.lifecycleBy(ctx, sb, "failed", err.Error()+"; it runs on")
	return err
}

// Resume undoes Pause: SIGCONT to the processes it stopped, then the
// network back.
func (r *Runner) Resume(ctx context.Context, id string) error {
	r.mu.Lock()
	s, ok := r.sandboxes[id]
	var sb Sandbox
	if ok {
		sb = s.info
	}
	r.mu.Unlock()
	if !ok || sb.phase == phasePooled {
		return fmt.Errorf("resume sandbox %q: %w", id, ErrNotFound)
	}
	if sb.phase != phasePaused {
		return fmt.Errorf("resume sandbox %s: it is %s, not paused: %w", id, sb.phase, ErrInvalid)
	}
	var rec pauseRecord
	if b, err := os.ReadFile(r.pausePath(id)); err == nil {
		_ = json.Unmarshal(b, &rec)
	}
	if err := r.freezer().Cont(rec.Pids); err != nil {
		return fmt.Errorf("resume sandbox %s: continue its processes: %w", id, err)
	}
	if err := r.blockNet(id, false); err != nil {
		return fmt.Errorf("resume sandbox %s: restore its network: %w", id, err)
	}
	os.Remove(r.pausePath(id))
	r.setPhase(id, phaseRunning)
	r.lifecycleBy(ctx, sb, "resumed", fmt.Sprintf("%d processes continued (SIGCONT); network restored", len(rec.Pids)))
	return nil
}

// initPid is the host PID of the sandbox's PID 1, as last seen (no engine
// call: a busy engine, say making a warm member, must not slow a pause),
// or from the engine when not known.
func (r *Runner) initPid(ctx context.Context, id, cid string) (int, error) {
	r.mu.Lock()
	pid := 0
	if sb, ok := r.sandboxes[id]; ok {
		pid = sb.initPid
	}
	r.mu.Unlock()
	if pid > 0 {
		return pid, nil
	}
	c, err := r.cfg.Engine.Inspect(ctx, cid)
	if err != nil || !c.Running || c.Pid <= 0 {
		return 0, fmt.Errorf("its container is not running: %v", err)
	}
	return c.Pid, nil
}

func (r *Runner) blockNet(id string, on bool) error {
	if r.pool == nil {
		return nil
	}
	return r.cfg.BlockNetwork(id, on)
}

func (r *Runner) freezer() freezer {
	if r.cfg.freezer != nil {
		return r.cfg.freezer
	}
	return procFreezer{}
}

// pausedAtStart says whether an adopted sandbox was left paused.
func (r *Runner) pausedAtStart(id string) bool {
	_, err := os.Stat(r.pausePath(id))
	return err == nil
}
