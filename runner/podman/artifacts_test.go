package podman_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"airlock/audit"
	"airlock/runner"
)

// endRecord waits for the destroyed record of a sandbox.
func (e *env) endRecord(t *testing.T, id string) *audit.Lifecycle {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		e.mu.Lock()
		for _, ev := range e.events {
			if ev.Kind == audit.KindLifecycle && ev.Sandbox == id && ev.Lifecycle.Stage == "destroyed" {
				e.mu.Unlock()
				return ev.Lifecycle
			}
		}
		e.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no destroyed record for %s", id)
	return nil
}

// checkArtifacts: the sandbox left its workspace change, its output and its
// command records.
func checkArtifacts(t *testing.T, r *runner.Runner, id string) {
	t.Helper()
	a, err := r.Artifacts(id)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, f := range a.Files {
		names = append(names, f.Name)
	}
	for _, want := range []string{"diff.patch", "files/note.txt", "outputs/1-out.tar", "commands.jsonl"} {
		if !slices.Contains(names, want) {
			t.Errorf("artifact %s missing: %q (errors %q, skipped %q)", want, names, a.Errors, a.Skipped)
		}
	}
	f, _, err := r.OpenArtifact(id, "files/note.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, _ := io.ReadAll(f); string(b) != "written in the sandbox\n" {
		t.Errorf("files/note.txt: %q", b)
	}
	c, _, err := r.OpenArtifact(id, "commands.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if b, _ := io.ReadAll(c); !strings.Contains(string(b), "written in the sandbox") {
		t.Errorf("commands.jsonl has not the command:\n%s", b)
	}
}

func (e *env) work(t *testing.T, lifetime time.Duration) runner.Sandbox {
	t.Helper()
	sb, err := e.r.Create(context.Background(), runner.CreateRequest{Image: busybox, Policy: "dev",
		Lifetime: lifetime, Outputs: []string{"/out"}})
	if err != nil {
		t.Fatal(err)
	}
	e.mustExec(t, sb.ID, "sh", "-c", "echo 'written in the sandbox' > /workspace/note.txt && mkdir /out && echo 42 > /out/r")
	return sb
}

func killContainer(t *testing.T, cid string) {
	t.Helper()
	c, err := engine.Inspect(context.Background(), cid)
	if err != nil || c.Pid <= 0 {
		t.Fatalf("inspect %s: %+v %v", cid, c, err)
	}
	if err := syscall.Kill(c.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// TestArtifactsContainerKilledFromOutside: kill -9 of the container's init
// from the host ends the sandbox (through Watch) with its artifacts.
func TestArtifactsContainerKilledFromOutside(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	sb := e.work(t, 0)
	e.r.Watch(200 * time.Millisecond)
	killContainer(t, sb.ContainerID)
	end := e.endRecord(t, sb.ID)
	if !strings.Contains(end.Detail, "stopped outside airlock") || !strings.Contains(end.Detail, "artifacts:") {
		t.Errorf("end record %+v", end)
	}
	checkArtifacts(t, e.r, sb.ID)
	e.assertGone(t, sb)
}

// TestArtifactsLifetime: a sandbox that hits its lifetime leaves them too.
func TestArtifactsLifetime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	sb := e.work(t, 4*time.Second)
	end := e.endRecord(t, sb.ID)
	if !strings.HasPrefix(end.Detail, "lifetime expired; artifacts:") {
		t.Errorf("end record %+v", end)
	}
	checkArtifacts(t, e.r, sb.ID)
	e.assertGone(t, sb)
}

// TestArtifactsAfterApplianceCrash: the appliance dies (no clean-up); one
// sandbox's container is killed while it is down, another passes its
// lifetime. At the restart both leave their artifacts and an end record.
func TestArtifactsAfterApplianceCrash(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	killed := e.work(t, 0)
	expired := e.work(t, 6*time.Second)
	e.r.Close() // the crash: nothing is torn down
	killContainer(t, killed.ContainerID)
	time.Sleep(time.Until(expired.Deadline))
	r2, err := runner.New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.r = r2
	if _, err := r2.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if end := e.endRecord(t, killed.ID); !strings.Contains(end.Detail, "reconcile at restart: not running") {
		t.Errorf("killed: end record %+v", end)
	}
	checkArtifacts(t, r2, killed.ID)
	e.assertGoneContainer(t, killed)
	if end := e.endRecord(t, expired.ID); !strings.HasPrefix(end.Detail, "lifetime expired; artifacts:") {
		t.Errorf("expired: end record %+v", end)
	}
	checkArtifacts(t, r2, expired.ID)
	e.assertGone(t, expired)
	if _, err := r2.Get(expired.ID); !errors.Is(err, runner.ErrNotFound) {
		t.Errorf("expired sandbox still listed: %v", err)
	}
}
