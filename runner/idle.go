package runner

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// idleClock is how long a sandbox with an IdleTimeout has run no command
// (r.mu guards it): busy counts the commands running in it, last is when
// one started or ended.
type idleClock struct {
	busy  int
	last  time.Time
	timer *time.Timer
}

// startIdle starts the idle clock of a sandbox that has an IdleTimeout.
// An adopted sandbox's clock starts at its adoption.
func (r *Runner) startIdle(sb *sandbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := sb.info.IdleTimeout
	if d <= 0 || sb.idle.timer != nil {
		return
	}
	id := sb.info.ID
	sb.idle.last = r.cfg.Now()
	sb.idle.timer = time.AfterFunc(d, func() { r.checkIdle(id) })
}

// busy notes a command starting (+1) or ending (-1) in sandbox id.
func (r *Runner) busy(id string, delta int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sb, ok := r.sandboxes[id]; ok {
		sb.idle.busy = max(sb.idle.busy+delta, 0)
		sb.idle.last = r.cfg.Now()
	}
}

// checkIdle destroys sandbox id when its idle timeout has passed, or
// looks again when it will.
func (r *Runner) checkIdle(id string) {
	r.mu.Lock()
	sb, ok := r.sandboxes[id]
	if !ok || r.closed || sb.idle.timer == nil {
		r.mu.Unlock()
		return
	}
	d := sb.info.IdleTimeout
	if left := d - r.cfg.Now().Sub(sb.idle.last); sb.idle.busy > 0 || left > 0 {
		if sb.idle.busy > 0 {
			left = d
		}
		sb.idle.timer.Reset(left)
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := r.destroy(ctx, id, fmt.Sprintf("idle timeout: no command ran for %s", d))
	if errors.Is(err, errResetting) { // a reset is replacing its container: look again after it
		r.mu.Lock()
		sb.idle.timer.Reset(time.Second)
		r.mu.Unlock()
		return
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		r.log.Warn("sandbox: destroy at its idle timeout", "sandbox", id, "err", err)
	}
}

// stopIdle stops the idle clock (r.mu held).
func (sb *sandbox) stopIdle() {
	if sb.idle.timer != nil {
		sb.idle.timer.Stop()
	}
}
