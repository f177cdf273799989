package runner

import (
	"context"
	"fmt"
)

// InitPID is the host PID of a running sandbox's PID 1; the preview
// dialer enters the sandbox's network namespace through it. A paused or
// stopped sandbox has none to offer.
func (r *Runner) InitPID(ctx context.Context, id string) (int, error) {
	sb, err := r.running(id)
	if err != nil {
		return 0, err
	}
	pid, err := r.initPid(ctx, id, sb.ContainerID)
	if err != nil {
		return 0, fmt.Errorf("sandbox %s: %w", id, err)
	}
	return pid, nil
}
