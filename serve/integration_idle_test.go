//go:build remote

package serve_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"airlock/client"
)

// TestIdleTimeout: a sandbox created with an idle timeout shows it, lives
// while commands run, and once none ran for that long is destroyed with
// its artifacts kept, the reason naming the idle timeout.
func TestIdleTimeout(t *testing.T) {
	l := newLab(t, busyboxImage)
	l.startServe()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const idle = 2 * time.Second
	sb, err := l.c.Create(ctx, client.CreateRequest{Image: busyboxImage, IdleTimeout: client.Duration(idle)})
	if err != nil {
		t.Fatalf("create sandbox: %v\n%s", err, l.tail(20))
	}
	defer l.c.Delete(context.Background(), sb.ID)
	if time.Duration(sb.IdleTimeout) != idle {
		t.Errorf("the sandbox shows idle_timeout %v, want %v", time.Duration(sb.IdleTimeout), idle)
	}
	if r := l.exec(sb.ID, "sleep 3"); r.code != 0 { // longer than the timeout, but running
		t.Fatalf("a command longer than the idle timeout: %v", r)
	}
	ended := time.Now()
	waitFor(t, 30*time.Second, "the idle sandbox to be destroyed", func() bool {
		_, err := l.c.Get(ctx, sb.ID)
		return client.IsCode(err, client.CodeNotFound)
	})
	if since := time.Since(ended); since < idle {
		t.Errorf("destroyed %s after its last command, before its idle timeout", since)
	}
	a, err := l.c.Artifacts(ctx, sb.ID)
	if err != nil || !strings.Contains(a.Reason, "idle timeout") {
		t.Errorf("artifacts %q, %v: want them kept, the reason naming the idle timeout", a.Reason, err)
	}
}
