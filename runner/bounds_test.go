package runner

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestExportBoundsWorkspaceCopy: a /workspace larger than its export
// bound is not copied to disk in full; the manifest names the key.
func TestExportBoundsWorkspaceCopy(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Artifacts.MaxWorkspaceBytes = 64 << 10 })
	ctx := context.Background()
	sb, err := h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p"})
	if err != nil {
		t.Fatal(err)
	}
	h.eng.containers[sb.ContainerID].files["/workspace/huge.bin"] = strings.Repeat("x", 1<<20)
	if err := h.r.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	a, err := h.r.Artifacts(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Errors) != 1 || !strings.Contains(a.Errors[0], "over the 65536-byte bound of its export copy (artifacts.max_workspace_mb)") {
		t.Errorf("errors %q", a.Errors)
	}
	for _, f := range a.Files {
		if strings.HasPrefix(f.Name, "files/") {
			t.Errorf("a changed file was kept past the bound: %s", f.Name)
		}
	}
}

// TestCommandRecordsBounded: commands.jsonl stops at its bound, is marked
// cut once (with a log line), and the manifest says where the rest is.
func TestCommandRecordsBounded(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Artifacts.MaxCommandsBytes = 4096 })
	ctx := context.Background()
	sb, err := h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p"})
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		if _, err := h.r.Exec(ctx, sb.ID, ExecRequest{Argv: []string{"echo", strings.Repeat("a", 100)}}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(h.r.commandsPath(sb.ID))
	if err != nil || st.Size() > 4096 || st.Size() < 2048 {
		t.Fatalf("commands.jsonl: %v, %v", st.Size(), err)
	}
	if err := h.r.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	a, _ := h.r.Artifacts(sb.ID)
	if len(a.Skipped) != 1 || !strings.Contains(a.Skipped[0], "commands.jsonl: cut at its bound of 4096 bytes (artifacts.max_commands_mb)") {
		t.Errorf("skipped %q", a.Skipped)
	}
}
