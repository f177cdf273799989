package serve

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/client"
	"airlock/policies"
	"airlock/runner"
)

// setupEngine is a container engine for create tests: every container
// runs at once, and each exec (the setup commands) records which task
// secrets and placeholders the appliance holds for the sandbox right then.
type setupEngine struct {
	app *Appliance

	mu      sync.Mutex
	sandbox map[string]string // container id -> sandbox id
	seen    []string          // per exec: "argv0: secret=value placeholders=N"
	argvs   [][]string        // every exec's argv, in order
	failAt  string            // argv[0] whose exec fails with exit 1
}

func (e *setupEngine) ImageID(context.Context, string) (string, error) { return "img1", nil }
func (e *setupEngine) Create(_ context.Context, s runner.Spec) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	cid := fmt.Sprintf("c%d", len(e.sandbox)+1)
	e.sandbox[cid] = s.Labels[runner.LabelSandbox]
	return cid, nil
}
func (e *setupEngine) Start(context.Context, string) error { return nil }
func (e *setupEngine) Inspect(_ context.Context, id string) (runner.Container, error) {
	return runner.Container{ID: id, Running: true, Pid: 1}, nil
}
func (e *setupEngine) List(context.Context, map[string]string) ([]runner.Container, error) {
	return nil, nil
}
func (e *setupEngine) Exec(_ context.Context, cid string, p runner.Process, started func()) (runner.ExitStatus, error) {
	started()
	e.mu.Lock()
	sb := e.sandbox[cid]
	e.mu.Unlock()
	v, _ := e.app.secrets.Lookup(sb, "deploy-token")
	line := fmt.Sprintf("%s: deploy-token=%q placeholders=%d", p.Argv[0], v, len(e.app.secrets.Placeholders(sb)))
	e.mu.Lock()
	e.seen = append(e.seen, line)
	e.argvs = append(e.argvs, p.Argv)
	e.mu.Unlock()
	if p.Argv[0] == e.failAt {
		fmt.Fprintf(p.Stderr, "fatal: could not read from the remote (%s)\n", p.Argv[0])
		return runner.ExitStatus{Code: 128}, nil
	}
	return runner.ExitStatus{}, nil
}
func (e *setupEngine) CopyIn(context.Context, string, string, io.Reader) error { return nil }
func (e *setupEngine) CopyOut(_ context.Context, _, _ string, w io.Writer) error {
	return tar.NewWriter(w).Close()
}
func (e *setupEngine) Pause(context.Context, string) error  { return runner.ErrUnsupported }
func (e *setupEngine) Resume(context.Context, string) error { return runner.ErrUnsupported }
func (e *setupEngine) Commit(context.Context, string, string, string) (string, error) {
	return "", runner.ErrUnsupported
}
func (e *setupEngine) Remove(context.Context, string) error { return nil }

const sentinelPolicy = `version = 1
[categories.internal_api]
hosts = ["api.example.test"]
routes = [{ methods = ["GET"], path = "/v1/*" }]
inject = { header = "Authorization", secret = "deploy-token", format = "Bearer {}" }
sentinels = ["deploy-token"]
`

// newCreateAppliance is an appliance with just what Create needs: the
// policies, the secrets and a runner on setupEngine (no network).
func newCreateAppliance(t *testing.T) (*Appliance, *setupEngine) {
	t.Helper()
	dir := t.TempDir()
	writePolicy(t, dir, "agent", sentinelPolicy)
	ps, err := newPolicySet(dir, policies.Operator{}, &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	a := &Appliance{cfg: &Config{PolicyDir: dir}, policies: ps, secrets: newSecrets(), log: slog.New(slog.DiscardHandler)}
	a.cfg.Sandbox.Max = 10
	eng := &setupEngine{app: a, sandbox: map[string]string{}}
	state := filepath.Join(t.TempDir(), "state")
	for _, d := range []string{filepath.Dir(state), filepath.Dir(filepath.Dir(state))} {
		if err := os.Chmod(d, 0o711); err != nil { // the sandbox user must reach it
			t.Fatal(err)
		}
	}
	r, err := runner.New(runner.Config{Engine: eng, Emitter: &recorder{}, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	a.runner = r
	return a, eng
}

// TestCreateRegistersSecretsBeforeSetup: task secrets and sentinel
// placeholders are held for the sandbox before its first setup command
// runs (so setup can use them through the proxy), and a failed create
// drops them.
func TestCreateRegistersSecretsBeforeSetup(t *testing.T) {
	a, eng := newCreateAppliance(t)
	ctx := context.Background()
	sb, err := a.Create(ctx, client.CreateRequest{Image: "busybox", Policy: "agent",
		Secrets: map[string]string{"deploy-token": "s3cret"}, Setup: [][]string{{"first"}, {"second"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`first: deploy-token="s3cret" placeholders=1`, `second: deploy-token="s3cret" placeholders=1`}
	if fmt.Sprint(eng.seen) != fmt.Sprint(want) {
		t.Errorf("at each setup command the appliance held:\n%q\nwant\n%q", eng.seen, want)
	}
	if v, ok := a.secrets.Lookup(sb.ID, "deploy-token"); !ok || v != "s3cret" {
		t.Errorf("after create: Lookup(%s) = %q, %v", sb.ID, v, ok)
	}

	eng.seen, eng.failAt = nil, "broken"
	_, err = a.Create(ctx, client.CreateRequest{Image: "busybox", Policy: "agent",
		Secrets: map[string]string{"deploy-token": "other"}, Setup: [][]string{{"broken"}}})
	if err == nil {
		t.Fatal("create with a failing setup command succeeded")
	}
	if len(eng.seen) != 1 || eng.seen[0] != `broken: deploy-token="other" placeholders=1` {
		t.Errorf("failing setup saw %q", eng.seen)
	}
	var failed string
	for _, id := range eng.sandbox {
		if id != sb.ID {
			failed = id
		}
	}
	if _, ok := a.secrets.Lookup(failed, "deploy-token"); ok || len(a.secrets.Placeholders(failed)) != 0 {
		t.Errorf("the failed sandbox %q still has its secrets or placeholders", failed)
	}

	// A create the runner refuses drops what was registered under its id:
	// the next create still works.
	if _, err := a.Create(ctx, client.CreateRequest{Image: "busybox", Policy: "agent", Env: map[string]string{"A=B": "x"}}); err == nil {
		t.Fatal("create with a bad env name succeeded")
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := a.Create(tctx, client.CreateRequest{Image: "busybox", Policy: "agent"}); err != nil {
		t.Fatalf("create after a rejected one: %v", err)
	}
}

// TestCreateWorkspaceGitClonesFirst: a workspace_git URL becomes the first
// setup command (git clone --depth 1 into /workspace, run inside the
// sandbox so its policy decides it), before the caller's own setup; a
// failed clone is an error naming the URL with git's output; bad URLs and
// a host workspace given as well are refused before anything starts.
func TestCreateWorkspaceGitClonesFirst(t *testing.T) {
	a, eng := newCreateAppliance(t)
	ctx := context.Background()
	const repo = "https://git.example.test/org/repo.git"
	_, err := a.Create(ctx, client.CreateRequest{Image: "busybox", Policy: "agent",
		WorkspaceGit: repo, Setup: [][]string{{"make", "deps"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"git", "clone", "--depth", "1", "--", repo, "/workspace"}, {"make", "deps"}}
	if fmt.Sprint(eng.argvs) != fmt.Sprint(want) {
		t.Errorf("setup commands ran as %q, want %q", eng.argvs, want)
	}

	eng.argvs, eng.failAt = nil, "git"
	_, err = a.Create(ctx, client.CreateRequest{Image: "busybox", Policy: "agent", WorkspaceGit: repo, Setup: [][]string{{"make"}}})
	if err == nil {
		t.Fatal("create with a failing clone succeeded")
	}
	for _, part := range []string{"workspace_git", repo, "exited 128", "fatal: could not read from the remote"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("clone error %q does not contain %q", err, part)
		}
	}
	if len(eng.argvs) != 1 {
		t.Errorf("after a failed clone these ran: %q", eng.argvs)
	}

	// The caller's own setup failing after a clone is not a clone failure.
	eng.argvs, eng.failAt = nil, "make"
	_, err = a.Create(ctx, client.CreateRequest{Image: "busybox", Policy: "agent", WorkspaceGit: repo, Setup: [][]string{{"make"}}})
	var se *runner.SetupError
	if !errors.As(err, &se) || se.Index != 1 || strings.Contains(err.Error(), "workspace_git") {
		t.Errorf("failing make after the clone: %v, want setup command 1's error, not a clone failure", err)
	}

	eng.argvs = nil
	for name, req := range map[string]client.CreateRequest{
		"http":        {WorkspaceGit: "http://git.example.test/org/repo.git"},
		"credentials": {WorkspaceGit: "https://user:tok@git.example.test/org/repo.git"},
		"both":        {WorkspaceGit: repo, Workspace: t.TempDir()},
	} {
		req.Image, req.Policy = "busybox", "agent"
		_, err := a.Create(ctx, req)
		var ae *client.Error
		if !errors.As(err, &ae) || ae.Code != client.CodeInvalid {
			t.Errorf("%s: err = %v, want an invalid-request error", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "tok@") {
			t.Errorf("%s: the error echoes the credential: %v", name, err)
		}
	}
	if len(eng.argvs) != 0 {
		t.Errorf("refused creates ran %q", eng.argvs)
	}
}
