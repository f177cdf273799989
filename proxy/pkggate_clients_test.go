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

// TestPackageGateNPMClient: npm install picks the newest mature
// version, skips one with an install script and one an advisory marks,
// and never runs a hidden version's script.
func TestPackageGateNPMClient(t *testing.T) {
	requireTool(t, "npm", "--version")
	g := newGateEnv(t)
	proj := filepath.Join(g.dir, "proj")
	os.MkdirAll(proj, 0o755)
	proxyURL := "http://" + g.explicit
	out, err := g.run(t, proj, "npm", "install", "--no-audit", "--no-fund", "--loglevel=warn",
		"--registry", g.regURL("registry.example.test", "/"), "--proxy", proxyURL, "--https-proxy", proxyURL,
		"--cafile", filepath.Join(g.dir, "ca.pem"),
		"gate-demo", "gate-scripts", "gate-mal", "@scope/gate-scoped")
	if err != nil {
		t.Fatalf("npm install: %v\n%s\nevents:\n%s", err, out, g.ev.dump())
	}
	for pkg, want := range map[string]string{"gate-demo": "1.1.0", "gate-scripts": "1.0.0", "gate-mal": "1.0.0", "@scope/gate-scoped": "1.0.0"} {
		if got := installedVersion(t, filepath.Join(proj, "node_modules", pkg, "package.json")); got != want {
			t.Errorf("npm installed %s@%s, want %s", pkg, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(proj, "node_modules", "gate-scripts", "SCRIPT-RAN")); err == nil {
		t.Error("a hidden version's install script ran")
	}
	// A pinned too-new version is refused, with the reason in npm's output.
	out, err = g.run(t, proj, "npm", "install", "--no-audit", "--no-fund",
		"--registry", g.regURL("registry.example.test", "/"), "--proxy", proxyURL, "--https-proxy", proxyURL,
		"--cafile", filepath.Join(g.dir, "ca.pem"), "gate-demo@2.0.0")
	if err == nil {
		t.Fatalf("npm installed gate-demo@2.0.0:\n%s", out)
	}
	if got := installedVersion(t, filepath.Join(proj, "node_modules", "gate-demo", "package.json")); got != "1.1.0" {
		t.Errorf("after the refused install gate-demo is %s", got)
	}
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
