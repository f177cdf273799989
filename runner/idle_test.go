package runner

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestIdleTimeoutDestroys: a sandbox that runs no command for its idle
// timeout is destroyed (the destroyed event says why); while a command
// runs, however long, it is not; a label keeps the timeout for adoption.
func TestIdleTimeoutDestroys(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Now = time.Now })
	release := make(chan struct{})
	h.eng.execFn = func(ctx context.Context, p Process) (ExitStatus, error) {
		if p.Argv[0] == "hold" {
			<-release
		}
		return ExitStatus{}, nil
	}
	ctx := context.Background()
	const idle = 150 * time.Millisecond
	sb, err := h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p", IdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := h.eng.Inspect(ctx, sb.ContainerID); err != nil || c.Labels[LabelIdle] != idle.String() {
		t.Errorf("labels %v (%v), want %s=%s", c.Labels, err, LabelIdle, idle)
	}
	done := make(chan error, 1)
	go func() { _, err := h.r.Exec(ctx, sb.ID, ExecRequest{Argv: []string{"hold"}}); done <- err }()
	time.Sleep(3 * idle) // a command runs all along: not idle
	if _, err := h.r.Get(sb.ID); err != nil {
		t.Fatalf("destroyed while a command ran: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	waitGone(t, h.r, sb.ID)
	if since := time.Since(ended); since < idle {
		t.Errorf("destroyed %s after the last command, before its idle timeout of %s", since, idle)
	}
	if a, err := h.r.Artifacts(sb.ID); err != nil || !strings.Contains(a.Reason, "idle timeout: no command ran for "+idle.String()) {
		t.Errorf("artifacts %+v (%v), want them kept with the idle timeout as the reason", a.Reason, err)
	}
}
