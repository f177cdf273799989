package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestWorkspaceNotTheStateDir: a workspace that is, holds or lies in one of
// the appliance's directories is refused (a bind would chown the CA key and
// secrets to the sandbox user), through a symbolic link too. The layout is
// serve's: the runner's StateDir is the runtime directory, and the
// appliance's state directory (CA key, secrets, owners) is Protected.
func TestWorkspaceNotTheStateDir(t *testing.T) {
	root := t.TempDir()
	state := filepath.Join(root, "var", "lib", "airlock")
	runtime := filepath.Join(root, "run", "airlock", "inst", "sandboxes")
	policies := filepath.Join(root, "etc", "airlock", "policies")
	for _, d := range []string{filepath.Join(state, "ca"), runtime, policies} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(state, link); err != nil {
		t.Fatal(err)
	}
	runLink := filepath.Join(root, "varrun")
	if err := os.Symlink(filepath.Join(root, "run"), runLink); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(root, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	// The runtime directory named through a link, as runtime_dir = /var/run/... would.
	r := &Runner{cfg: Config{StateDir: filepath.Join(runLink, "airlock", "inst", "sandboxes"),
		ArtifactDir: filepath.Join(state, "artifacts", "inst"), Protected: []string{state, policies}}}
	for _, dir := range []string{state, filepath.Join(state, "ca"), filepath.Join(root, "var", "lib"), filepath.Join(root, "var"), "/", link, state + "/",
		runtime, filepath.Join(root, "run", "airlock"), policies, filepath.Join(root, "etc")} {
		if err := r.checkWorkspace(dir); !errors.Is(err, ErrInvalid) {
			t.Errorf("workspace %s: %v, want refused", dir, err)
		}
	}
	for _, dir := range []string{"", work, filepath.Join(root, "var", "lib-other")} {
		if err := r.checkWorkspace(dir); err != nil {
			t.Errorf("workspace %s: %v, want allowed", dir, err)
		}
	}
}

// TestNoWorkspaceStaysNone: a create without a host workspace gets none
// (resolving "" through links gave ".", the appliance's working directory,
// which the sandbox then got as its workspace).
func TestNoWorkspaceStaysNone(t *testing.T) {
	h := newHarness(t, nil)
	sb, err := h.r.Create(context.Background(), CreateRequest{Image: "img", Policy: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Workspace.HostDir != "" {
		t.Fatalf("a sandbox created without a workspace has %q", sb.Workspace.HostDir)
	}
	if got := realPath(""); got != "" {
		t.Fatalf(`realPath("") = %q`, got)
	}
}
