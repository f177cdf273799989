package agent_test

import (
	"bytes"
	"strings"
	"testing"

	"airlock/internal/agentwire"
	"airlock/runner/agent"
)

func run(t *testing.T, c *agent.Client, req agentwire.Request, stdin string) (*agentwire.Exit, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	s := agent.Streams{Stdout: &out, Stderr: &errb}
	if stdin != "" {
		s.Stdin = strings.NewReader(stdin)
	}
	if req.ID == "" {
		req.ID = testID(t)
	}
	e, err := c.Exec(ctx(t), req, s, nil)
	if err != nil {
		t.Fatalf("exec %v: %v", req.Argv, err)
	}
	return e, out.String(), errb.String()
}

func TestExecBasics(t *testing.T) {
	_, pid := sandbox(t, defaultCaps)
	c := client(t, pid)
	e, out, _ := run(t, c, agentwire.Request{ID: "a1", Argv: []string{"echo", "hi"}}, "")
	if e.Code != 0 || out != "hi\n" {
		t.Fatalf("echo: %+v %q", e, out)
	}
	e, out, errs := run(t, c, agentwire.Request{ID: "a2", Shell: "cat; echo err >&2; exit 3", Cwd: "/tmp", Env: []string{"X=1"}}, "in put")
	if e.Code != 3 || out != "in put" || errs != "err\n" {
		t.Fatalf("shell: %+v %q %q", e, out, errs)
	}
	e, _, errs = run(t, c, agentwire.Request{ID: "a3", Argv: []string{"no-such-cmd"}}, "")
	if e.Code != 127 || !strings.Contains(errs, "command not found") {
		t.Fatalf("missing command: %+v %q", e, errs)
	}
	e, out, _ = run(t, c, agentwire.Request{ID: "a4", Shell: "id -u; pwd", User: "65534", Cwd: "/tmp"}, "")
	if e.Code != 0 || out != "65534\n/tmp\n" {
		t.Fatalf("user/cwd: %+v %q", e, out)
	}
}

// testID is an exec id made of the test's name.
func testID(t *testing.T) string {
	id := []byte("t-" + t.Name())
	for i, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			id[i] = '_'
		}
	}
	if len(id) > 64 {
		id = id[len(id)-64:]
	}
	return string(id)
}
