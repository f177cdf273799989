package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestCreateRequestID: a create given an id uses it (what the caller keyed
// by it is in place before any command runs); an id in use, or one not safe
// in a path and a container name, fails the create with ErrInvalid before
// the engine is asked for anything.
func TestCreateRequestID(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	var seen []string
	h.eng.execFn = func(context.Context, Process) (ExitStatus, error) {
		seen = append(seen, fmt.Sprint(len(h.r.List())))
		return ExitStatus{}, nil
	}
	sb, err := h.r.Create(ctx, CreateRequest{ID: "chosen-by-serve", Image: "img", Policy: "p", Setup: [][]string{{"true"}}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != "chosen-by-serve" || h.t.index("event lifecycle sandbox=chosen-by-serve started") < 0 {
		t.Errorf("sandbox id %q, want the request's; transcript:\n%s", sb.ID, h.t)
	}
	if len(seen) != 1 {
		t.Errorf("setup ran %d times", len(seen))
	}
	creates := strings.Count(h.t.String(), "engine.Create")
	for name, id := range map[string]string{
		"in use":    "chosen-by-serve",
		"same veth": "chosen-by-other",
		"slash":     "../x",
		"uppercase": "ABC",
		"too long":  strings.Repeat("a", 64),
		"leading -": "-a",
	} {
		if _, err := h.r.Create(ctx, CreateRequest{ID: id, Image: "img", Policy: "p"}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: id %q: %v, want ErrInvalid", name, id, err)
		}
	}
	if got := strings.Count(h.t.String(), "engine.Create"); got != creates {
		t.Errorf("refused creates reached the engine: %d creates, want %d", got, creates)
	}
	if _, err := h.r.Get("chosen-by-serve"); err != nil {
		t.Errorf("the first sandbox is gone after a create reused its id: %v", err)
	}
	// Without an id the runner draws one.
	sb2, err := h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p"})
	if err != nil || sb2.ID == "" || sb2.ID == sb.ID {
		t.Errorf("create without an id: %q, %v", sb2.ID, err)
	}
}

// TestSetupErrorIsTyped: a failing setup command is a *SetupError naming
// its index, argv, exit code and stderr; one that cannot run carries the
// engine's error.
func TestSetupErrorIsTyped(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	h.eng.execFn = func(_ context.Context, p Process) (ExitStatus, error) {
		switch p.Argv[0] {
		case "false":
			fmt.Fprintln(p.Stderr, "fatal: repository not found")
			return ExitStatus{Code: 128}, nil
		case "gone":
			return ExitStatus{}, errEngineGone
		}
		return ExitStatus{}, nil
	}
	_, err := h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p", Setup: [][]string{{"true"}, {"false", "x"}}})
	var se *SetupError
	if !errors.As(err, &se) {
		t.Fatalf("Create: %v, want a *SetupError", err)
	}
	if se.Index != 1 || fmt.Sprint(se.Argv) != "[false x]" || se.ExitCode != 128 || se.Stderr != "fatal: repository not found" || se.Err != nil {
		t.Errorf("SetupError %+v", se)
	}
	if !strings.Contains(err.Error(), `setup command 1 ["false" "x"] exited 128: fatal: repository not found`) {
		t.Errorf("message %q", err)
	}
	_, err = h.r.Create(ctx, CreateRequest{Image: "img", Policy: "p", Setup: [][]string{{"gone"}}})
	if !errors.As(err, &se) || se.Index != 0 || !errors.Is(err, errEngineGone) {
		t.Errorf("Create: %v, want a *SetupError wrapping the engine's error", err)
	}
}

var errEngineGone = errors.New("engine gone")
