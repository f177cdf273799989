package runner

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultWatchInterval is how often Watch looks for containers that ended
// outside the runner.
const DefaultWatchInterval = 2 * time.Second

// Watch starts looking, every interval (0: DefaultWatchInterval), for
// running sandboxes whose container stopped or disappeared without the
// runner (killed from outside, crashed, removed by hand); each is destroyed
// with its artifacts exported and an end record naming the cause. Close
// stops it. Call it after Reconcile.
func (r *Runner) Watch(interval time.Duration) {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	r.mu.Lock()
	if r.closed || r.stopWatch != nil {
		r.mu.Unlock()
		return
	}
	stop := make(chan struct{})
	r.stopWatch = stop
	r.mu.Unlock()
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				r.checkContainers()
			}
		}
	}()
}

// checkContainers destroys the running sandboxes whose container is not
// running.
func (r *Runner) checkContainers() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sbs := r.List() // before the engine's list: a sandbox made meanwhile is not judged by it
	members := r.idleMembers()
	cs, err := r.cfg.Engine.List(ctx, map[string]string{LabelManaged: "true", LabelInstance: r.cfg.Instance})
	if err != nil {
		r.log.Warn("sandbox watch: list containers", "err", err)
		return
	}
	byID := map[string]Container{}
	for _, c := range cs {
		byID[c.ID] = c
	}
	for _, sb := range sbs {
		if sb.phase != phaseRunning || sb.ContainerID == "" {
			continue
		}
		c, ok := byID[sb.ContainerID]
		if ok && c.Running {
			continue
		}
		why := "its container disappeared outside airlock"
		if ok {
			why = fmt.Sprintf("its container stopped outside airlock (exit code %d)", c.ExitCode)
		}
		go r.died(sb.ID, sb.ContainerID, why)
	}
	r.checkMembers(members, byID)
}

// died destroys sandbox id if it still runs in container cid and that
// container is indeed not running (a reset may have replaced it since).
func (r *Runner) died(id, cid, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if sb, err := r.Get(id); err != nil || sb.ContainerID != cid || sb.phase != phaseRunning {
		return
	}
	c, err := r.cfg.Engine.Inspect(ctx, cid)
	if err == nil && c.Running || err != nil && !errors.Is(err, ErrNotFound) {
		return // running after all, or the engine cannot say now: the next tick looks again
	}
	r.log.Warn("sandbox ended outside the runner", "sandbox", id, "reason", why)
	if err := r.destroy(ctx, id, why); err != nil {
		r.log.Warn("sandbox watch: destroy", "sandbox", id, "err", err)
	}
}
