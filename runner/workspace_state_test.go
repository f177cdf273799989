package runner

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestWorkspaceNotTheStateDir: a workspace that is, holds or lies in the
// appliance's state directory is refused (a bind would chown the CA key
// and secrets to the sandbox user), through a symbolic link too.
func TestWorkspaceNotTheStateDir(t *testing.T) {
	root := t.TempDir()
	state := filepath.Join(root, "lib", "airlock")
	if err := os.MkdirAll(filepath.Join(state, "sandboxes"), 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(state, link); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(root, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &Runner{cfg: Config{StateDir: state}}
	for _, dir := range []string{state, filepath.Join(state, "sandboxes"), filepath.Join(root, "lib"), "/", link, state + "/"} {
		if err := r.checkWorkspace(dir); !errors.Is(err, ErrInvalid) {
			t.Errorf("workspace %s: %v, want refused", dir, err)
		}
	}
	for _, dir := range []string{"", work, filepath.Join(root, "lib-other")} {
		if err := r.checkWorkspace(dir); err != nil {
			t.Errorf("workspace %s: %v, want allowed", dir, err)
		}
	}
}
