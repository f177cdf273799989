package runner

import (
	"context"
	"errors"
	"strings"
	"testing"

	"airlock/audit"
)

// TestReset: a new container from the same spec on the same address and
// veth, the network path detached from the old veth and attached to the
// new one before its peer moves, the old files gone, setup run again; the
// event names both containers.
func TestReset(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	sb, err := h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p", Setup: [][]string{{"echo", "setup"}}})
	if err != nil {
		t.Fatal(err)
	}
	h.eng.containers[sb.ContainerID].files["/workspace/before"] = "x"
	mark := len(h.t.lines)
	res, err := h.r.Reset(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.OldContainer != sb.ContainerID || res.NewContainer == sb.ContainerID || res.Sandbox.Address != sb.Address || res.ImageID != "sha256:img" {
		t.Errorf("result %+v (before: %+v)", res, sb)
	}
	if _, ok := h.eng.containers[sb.ContainerID]; ok {
		t.Error("the old container is still there")
	}
	if len(h.eng.containers[res.NewContainer].files) != 0 {
		t.Errorf("files in the new container: %v", h.eng.containers[res.NewContainer].files)
	}
	after := strings.Join(h.t.lines[mark:], "\n")
	order := []string{"engine.Remove " + sb.ContainerID, "hook.Detach " + sb.ID, "net.DelLink alk-",
		"engine.Create " + res.NewContainer, "engine.Start", "hook.Attach", "net.MoveIn", `argv=["echo" "setup"]`, "event lifecycle sandbox=" + sb.ID + " reset"}
	pos := 0
	for _, o := range order {
		i := strings.Index(after[pos:], o)
		if i < 0 {
			t.Fatalf("%q missing or out of order after reset:\n%s", o, after)
		}
		pos += i
	}
	got, _ := h.r.Get(sb.ID)
	if got.State != audit.StateRunning || got.ContainerID != res.NewContainer {
		t.Errorf("after reset: %+v", got)
	}
	if _, err := h.r.Reset(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("reset of an unknown sandbox: %v", err)
	}
}

// TestResetFailureDestroys: a reset whose new container cannot start ends
// the sandbox, with its artifacts, instead of leaving it half made.
func TestResetFailureDestroys(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	sb, err := h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p", Setup: [][]string{{"true"}}})
	if err != nil {
		t.Fatal(err)
	}
	h.eng.execFn = func(context.Context, Process) (ExitStatus, error) { return ExitStatus{Code: 3}, nil }
	if _, err := h.r.Reset(ctx, sb.ID); err == nil || !strings.Contains(err.Error(), "exited 3") {
		t.Fatalf("reset with a failing setup: %v", err)
	}
	if _, err := h.r.Get(sb.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("the sandbox is still there: %v", err)
	}
	if end := h.endRecord(t, sb.ID); !strings.HasPrefix(end.Detail, "reset failed") {
		t.Errorf("end record %+v", end)
	}
}
