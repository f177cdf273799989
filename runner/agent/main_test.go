package agent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"airlock/runner/agent"
)

const busybox = "localhost/airlock/busybox:1"

var (
	skipReason string
	binDir     string // airlock-init and the probe, mounted at /.airlock
	sbUser     *user.User
)

// TestMain builds airlock-init and the probe and checks for root, the
// sandbox user and the busybox image; tests that need them skip with the
// reason otherwise.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		if os.Geteuid() != 0 {
			skipReason = "needs root (setns into the sandbox's netns, the sandbox user's podman)"
			return m.Run()
		}
		var err error
		if sbUser, err = user.Lookup("airlock-sandbox"); err != nil {
			skipReason = fmt.Sprintf("no sandbox user (run 'make setup'): %v", err)
			return m.Run()
		}
		if _, err := exec.LookPath("podman"); err != nil {
			skipReason = "podman is not installed (run 'make setup')"
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "airlock-agent-test-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		os.Chmod(dir, 0o755)
		binDir = dir
		for pkg, out := range map[string]string{"airlock/cmd/airlock-init": "airlock-init", "airlock/runner/agent/testdata/probe": "probe"} {
			cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, out), pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if b, err := cmd.CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, b)
				return 1
			}
		}
		// As the runner installs it: the supervisors' copy execute-only,
		// owned by root.
		if b, err := os.ReadFile(filepath.Join(dir, "airlock-init")); err != nil || os.WriteFile(filepath.Join(dir, "airlock-init-shim"), b, 0o711) != nil {
			fmt.Fprintf(os.Stderr, "copy airlock-init-shim: %v\n", err)
			return 1
		}
		if out, err := podman("image", "exists", busybox); err != nil {
			skipReason = fmt.Sprintf("image %s is absent (run 'make image'): %v %s", busybox, err, out)
		}
		return m.Run()
	}())
}

func need(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

// podman runs the podman CLI as the sandbox user.
func podman(args ...string) (string, error) {
	runDir := "/run/user/" + sbUser.Uid
	if _, err := os.Stat(runDir); err != nil {
		uid, _ := strconv.Atoi(sbUser.Uid)
		gid, _ := strconv.Atoi(sbUser.Gid)
		os.MkdirAll(runDir, 0o700)
		os.Chown(runDir, uid, gid)
	}
	cmd := exec.Command("runuser", append([]string{"-u", sbUser.Username, "--", "env",
		"XDG_RUNTIME_DIR=" + runDir, "HOME=" + sbUser.HomeDir, "podman", "--runtime", "runc"}, args...)...)
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

var defaultCaps = "CAP_CHOWN,CAP_DAC_OVERRIDE,CAP_FOWNER,CAP_FSETID,CAP_KILL,CAP_SETGID,CAP_SETUID,CAP_NET_BIND_SERVICE"

// sandbox starts a container under the product's hardening with
// airlock-init as PID 1 and returns its host pid; it is removed at the
// end of the test.
func sandbox(t *testing.T, caps string, extra ...string) (string, int) {
	t.Helper()
	need(t)
	b := make([]byte, 4)
	rand.Read(b)
	name := "airlock-agenttest-" + hex.EncodeToString(b)
	args := append([]string{"run", "-d", "--name", name, "--network", "none", "--cap-drop", "ALL",
		"--cap-add", caps, "--security-opt", "no-new-privileges", "--read-only",
		"--tmpfs", "/tmp", "--tmpfs", "/run", "--tmpfs", "/workspace",
		"-v", binDir + ":/.airlock:ro", "--entrypoint", "/.airlock/airlock-init"}, extra...)
	args = append(args, busybox)
	if out, err := podman(args...); err != nil {
		t.Fatalf("podman run: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := podman("rm", "-f", "-t", "0", name); err != nil {
			t.Errorf("podman rm %s: %v: %s", name, err, out)
		}
	})
	out, err := podman("inspect", "-f", "{{.State.Pid}}", name)
	pid, _ := strconv.Atoi(out)
	if err != nil || pid <= 0 {
		t.Fatalf("inspect %s: %v %q", name, err, out)
	}
	return name, pid
}

// client dials the sandbox's agent, retrying while it starts.
func client(t *testing.T, pid int) *agent.Client {
	t.Helper()
	var last error
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		c, err := agent.New(pid)
		if err == nil {
			t.Cleanup(func() { c.Close() })
			return c
		}
		last = err
	}
	t.Fatalf("no agent in pid %d: %v", pid, last)
	return nil
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}
