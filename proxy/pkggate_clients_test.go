package proxy

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Real clients through the real proxy (explicit listener, CONNECT, MITM
// with the appliance CA) against the fake registry: whatever the
// client's own settings, no version younger than the gate is installed;
// the newest mature one is.

func requireTool(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Skipf("skipping: %s %s does not run (%v): %s", name, strings.Join(args, " "), err, out)
	}
}

// cleanEnv is an environment without proxy or client settings of the host.
func (g *gateEnv) cleanEnv() []string {
	home := filepath.Join(g.dir, "home")
	os.MkdirAll(home, 0o755)
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "PIP_CONFIG_FILE=/dev/null", "PYTHONNOUSERSITE=1",
		"npm_config_userconfig=" + filepath.Join(home, ".npmrc"), "npm_config_cache=" + filepath.Join(g.dir, "npm-cache"),
		"npm_config_update_notifier=false"}
}

func (g *gateEnv) run(t *testing.T, dir, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, g.cleanEnv()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func installedVersion(t *testing.T, pkgJSON string) string {
	t.Helper()
	b, err := os.ReadFile(pkgJSON)
	if err != nil {
		t.Fatalf("not installed: %v", err)
	}
	var pj struct{ Version string }
	json.Unmarshal(b, &pj)
	return pj.Version
}

// TestPackageGatePipClient: pip (which asks for the PEP 691 JSON page)
// installs the newest mature version, and never one an advisory marks.
func TestPackageGatePipClient(t *testing.T) {
	requireTool(t, "python3", "-m", "pip", "--version")
	g := newGateEnv(t)
	target := filepath.Join(g.dir, "py")
	out, err := g.run(t, g.dir, "python3", "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir",
		"--target", target, "--index-url", g.regURL("registry.example.test", "/simple/"), "--proxy", "http://"+g.explicit,
		"--cert", filepath.Join(g.dir, "ca.pem"), "gate-demo", "gate-mal")
	if err != nil {
		t.Fatalf("pip install: %v\n%s\nevents:\n%s", err, out, g.ev.dump())
	}
	for mod, want := range map[string]string{"gate_demo": "1.0.0", "gate_mal": "1.0.0"} {
		matches, _ := filepath.Glob(filepath.Join(target, mod+"-*.dist-info"))
		if len(matches) != 1 || !strings.HasSuffix(matches[0], mod+"-"+want+".dist-info") {
			t.Errorf("pip installed %v, want %s %s", matches, mod, want)
		}
	}
	out, err = g.run(t, g.dir, "python3", "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir",
		"--target", filepath.Join(g.dir, "py2"), "--index-url", g.regURL("registry.example.test", "/simple/"), "--proxy", "http://"+g.explicit,
		"--cert", filepath.Join(g.dir, "ca.pem"), "gate-demo==2.0.0")
	if err == nil {
		t.Fatalf("pip installed gate-demo==2.0.0:\n%s", out)
	}
}
