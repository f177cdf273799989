package podman_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock/runner"
)

// TestReset: after a reset a file written before is gone, the address and
// veth are the same, commands run through the agent again, and the event
// names the old and new containers and the image.
func TestReset(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	sb, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	e.mustExec(t, sb.ID, "sh", "-c", "echo x > /root/before && echo y > /workspace/before")
	res, err := e.r.Reset(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.NewContainer == sb.ContainerID || res.Sandbox.Address != sb.Address || res.ImageID == "" {
		t.Errorf("reset %+v, before %+v", res, sb)
	}
	if got := e.mustExec(t, sb.ID, "sh", "-c", "ls /root/before /workspace/before 2>/dev/null; true"); got != "" {
		t.Errorf("files left after reset: %q", got)
	}
	if got := e.mustExec(t, sb.ID, "ip", "-4", "addr", "show", "eth0"); !strings.Contains(got, sb.Address.String()+"/32") {
		t.Errorf("address after reset: %q", got)
	}
	if got, _ := e.r.Get(sb.ID); got.Agent != runner.AgentName {
		t.Errorf("after reset commands go through %s (%s)", got.Agent, got.AgentError)
	}
	e.mu.Lock()
	attachedTo := e.attached[sb.ID]
	e.mu.Unlock()
	if attachedTo == 0 {
		t.Error("the network path is not attached after reset")
	}
	e.assertGoneContainer(t, runner.Sandbox{ID: "none", ContainerID: sb.ContainerID})
	found := false
	e.mu.Lock()
	for _, ev := range e.events {
		if ev.Lifecycle != nil && ev.Sandbox == sb.ID && ev.Lifecycle.Stage == "reset" {
			found = strings.Contains(ev.Lifecycle.Detail, sb.ContainerID[:12]) && strings.Contains(ev.Lifecycle.Detail, res.NewContainer[:12])
		}
	}
	e.mu.Unlock()
	if !found {
		t.Error("no reset event naming both containers")
	}
}

// BenchmarkReset: reset of a busybox sandbox, reported as p50-ms.
func BenchmarkReset(b *testing.B) {
	e := newEnv(b, nil)
	ctx := context.Background()
	sb, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev"})
	if err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := e.r.Reset(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	b.ReportMetric(p50(ds), "p50-ms")
}

// TestTemplate: a template built from busybox with a setup command holds
// its result; a sandbox from it records the template and image ID; a failing
// setup leaves no template and no image.
func TestTemplate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *runner.Config) { c.TemplateDir = filepath.Join(os.TempDir(), "airlock-tmpl-"+randHex(4)) })
	defer os.RemoveAll(e.cfg.TemplateDir)
	ctx := context.Background()
	name := "t-" + e.instance
	tm, err := e.r.BuildTemplate(ctx, runner.TemplateRequest{Name: name, From: busybox, Policy: "dev",
		Setup: []string{"echo baked > /etc/marker"}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.r.RemoveTemplate(context.Background(), name)
	sb, err := e.r.Create(ctx, runner.CreateRequest{Template: name, Policy: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.mustExec(t, sb.ID, "cat", "/etc/marker"); got != "baked\n" {
		t.Errorf("/etc/marker in a sandbox from the template: %q", got)
	}
	if sb.Template != tm.Ref || sb.ImageID != tm.ImageID {
		t.Errorf("sandbox %+v, template %+v", sb, tm)
	}
	if err := e.r.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	_, err = e.r.BuildTemplate(ctx, runner.TemplateRequest{Name: name + "-bad", From: busybox, Policy: "dev",
		Setup: []string{"echo partial > /etc/p", "echo failing >&2; exit 7"}})
	var te *runner.TemplateError
	if !errors.As(err, &te) || te.ExitCode != 7 || !strings.Contains(te.Output, "failing") {
		t.Fatalf("failing build: %v", err)
	}
	if _, err := engine.ImageID(ctx, runner.TemplateRepo+"/"+name+"-bad:v1"); !errors.Is(err, runner.ErrNotFound) {
		t.Errorf("image of a failed build: %v", err)
	}
}

// TestTemplateFromSnapshot: the engine's change list reaches the record,
// with a warning for shell history and a credential.
func TestTemplateFromSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *runner.Config) { c.TemplateDir = filepath.Join(os.TempDir(), "airlock-tmpl-"+randHex(4)) })
	defer os.RemoveAll(e.cfg.TemplateDir)
	ctx := context.Background()
	sb, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	e.mustExec(t, sb.ID, "sh", "-c", "echo ls > /root/.ash_history && mkdir -p /root/.aws && echo k > /root/.aws/credentials && echo t > /opt-tool")
	name := "s-" + e.instance
	tm, err := e.r.TemplateFromSnapshot(ctx, sb.ID, name, "")
	if err != nil {
		t.Fatal(err)
	}
	defer e.r.RemoveTemplate(context.Background(), name)
	w := strings.Join(tm.Snapshot.Warnings, "\n")
	if !strings.Contains(w, "/root/.ash_history looks like shell history") || !strings.Contains(w, "/root/.aws/credentials looks like a credential") ||
		!slicesContains(tm.Snapshot.Paths, "/opt-tool") {
		t.Errorf("summary %+v", tm.Snapshot)
	}
}

func slicesContains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
