package runner

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"airlock/audit"
)

func artifactNames(a Artifacts) []string {
	var out []string
	for _, f := range a.Files {
		out = append(out, f.Name)
	}
	return out
}

func (h *harness) endRecord(t *testing.T, id string) *audit.Lifecycle {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.events {
		if e.Kind == audit.KindLifecycle && e.Sandbox == id && e.Lifecycle.Stage == "destroyed" {
			return e.Lifecycle
		}
	}
	t.Fatalf("no destroyed record for %s", id)
	return nil
}

// TestDestroyExportsArtifacts: a destroy leaves the diff, the changed files,
// the declared outputs and the command records, listed and served after the
// sandbox is gone; a file over the bound is listed as skipped.
func TestDestroyExportsArtifacts(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Artifacts.MaxFileBytes = 4096 })
	ctx := context.Background()
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("one\n"), 0o644)
	sb, err := h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p", Workspace: Workspace{HostDir: ws, Mode: WorkspaceCopy},
		Outputs: []string{"/out/result", "/missing"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.r.Exec(ctx, sb.ID, ExecRequest{Argv: []string{"echo", "hi"}}); err != nil {
		t.Fatal(err)
	}
	c := h.eng.containers[sb.ContainerID]
	c.files["/workspace/a.txt"] = "two\n"
	c.files["/workspace/sub/b.txt"] = "new\n"
	c.files["/workspace/big.bin"] = strings.Repeat("x", 5000)
	c.files["/out/result"] = "42\n"
	if err := h.r.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	a, err := h.r.Artifacts(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"changes.json", "commands.jsonl", "diff.patch", "files/a.txt", "files/sub/b.txt", "outputs/1-out_result.tar"}
	if got := artifactNames(a); !slices.Equal(got, want) {
		t.Errorf("files %q, want %q", got, want)
	}
	if len(a.Skipped) != 2 || !strings.Contains(a.Skipped[0]+a.Skipped[1], "files/big.bin: 5000 bytes") ||
		!strings.Contains(a.Skipped[0]+a.Skipped[1], "output /missing: not found") {
		t.Errorf("skipped %q", a.Skipped)
	}
	if a.Reason != "destroyed on request" || a.Sandbox.ID != sb.ID {
		t.Errorf("manifest %+v", a)
	}
	f, af, err := h.r.OpenArtifact(sb.ID, "files/a.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "two\n" || af.Path != "/workspace/a.txt" || af.Kind != ArtifactFileKind {
		t.Errorf("files/a.txt: %q %+v", b, af)
	}
	f, _, err = h.r.OpenArtifact(sb.ID, "commands.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(f)
	f.Close()
	if !strings.Contains(string(b), `"argv":["echo","hi"]`) || !strings.Contains(string(b), `"stage":"finished"`) {
		t.Errorf("commands.jsonl:\n%s", b)
	}
	if _, _, err := h.r.OpenArtifact(sb.ID, "../../x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a name not in the manifest: %v", err)
	}
	if _, err := h.r.Artifacts("../etc"); !errors.Is(err, ErrInvalid) {
		t.Errorf("a bad id: %v", err)
	}
	end := h.endRecord(t, sb.ID)
	if !strings.Contains(end.Detail, "artifacts: 6 files") || len(end.Changes) != 3 {
		t.Errorf("end record %+v", end)
	}
}

// TestWatchDestroysAStoppedSandbox: a container that stops outside the
// runner ends its sandbox with artifacts and an end record naming why.
func TestWatchDestroysAStoppedSandbox(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	sb, err := h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p"})
	if err != nil {
		t.Fatal(err)
	}
	h.eng.containers[sb.ContainerID].files["/workspace/w"] = "x\n"
	h.r.Watch(5 * time.Millisecond)
	h.eng.mu.Lock()
	h.eng.containers[sb.ContainerID].running = false
	h.eng.mu.Unlock()
	waitGone(t, h.r, sb.ID)
	if end := h.endRecord(t, sb.ID); !strings.Contains(end.Detail, "stopped outside airlock") {
		t.Errorf("end record %+v", end)
	}
	if a, err := h.r.Artifacts(sb.ID); err != nil || !slices.Contains(artifactNames(a), "files/w") {
		t.Errorf("artifacts %v %v", artifactNames(a), err)
	}
}

func waitGone(t *testing.T, r *Runner, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := r.Get(id); errors.Is(err, ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still there", id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReconcileExportsAStoppedContainer: after a crash of the appliance, a
// sandbox whose container stopped meanwhile leaves its artifacts and an end
// record when the next runner reconciles.
func TestReconcileExportsAStoppedContainer(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	sb, err := h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p", Outputs: []string{"/out"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.r.Exec(ctx, sb.ID, ExecRequest{Argv: []string{"echo", "before the crash"}}); err != nil {
		t.Fatal(err)
	}
	c := h.eng.containers[sb.ContainerID]
	c.files["/out/r"] = "result\n"
	c.running = false
	r2, err := New(h.r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := r2.Artifacts(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := artifactNames(a); !slices.Contains(got, "commands.jsonl") || !slices.Contains(got, "outputs/1-out.tar") {
		t.Errorf("files %q", got)
	}
	if end := h.endRecord(t, sb.ID); !strings.Contains(end.Detail, "reconcile at restart: not running") {
		t.Errorf("end record %+v", end)
	}
}

// TestArtifactRetention: artifacts past MaxAge, then the oldest over
// MaxTotalBytes, are removed at the next export.
func TestArtifactRetention(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := newHarness(t, func(c *Config) {
		c.Now = func() time.Time { return now }
		c.Artifacts.MaxAge = time.Hour
		c.Artifacts.MaxTotalBytes = 1
	})
	ctx := context.Background()
	var ids []string
	for i := 0; i < 3; i++ {
		sb, err := h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p"})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.r.Destroy(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
		now = now.Add(time.Minute)
	}
	for i, id := range ids {
		_, err := h.r.Artifacts(id)
		if kept := err == nil; kept != (i == 2) {
			t.Errorf("sandbox %d kept=%t (%v)", i, kept, err)
		}
	}
}

func TestValidOutputs(t *testing.T) {
	for _, bad := range [][]string{{"rel"}, {"/a/../b"}, {"/a/"}, {"/a\x00"}} {
		if err := validOutputs(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if err := validOutputs([]string{"/", "/workspace/out"}); err != nil {
		t.Error(err)
	}
}

// TestArtifactsListASandboxFileNamedLikeTheTemp: a changed file whose name
// starts like the exporter's temporary workspace tar is still listed (only
// the top-level temporary is left out of the manifest).
func TestArtifactsListASandboxFileNamedLikeTheTemp(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	sb, err := h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p", Workspace: Workspace{HostDir: t.TempDir(), Mode: WorkspaceCopy}})
	if err != nil {
		t.Fatal(err)
	}
	h.eng.containers[sb.ContainerID].files["/workspace/.workspace-x.tar"] = "mine\n"
	if err := h.r.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	a, err := h.r.Artifacts(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(artifactNames(a), "files/.workspace-x.tar") {
		t.Errorf("files %q: files/.workspace-x.tar is on disk but not listed", artifactNames(a))
	}
}
