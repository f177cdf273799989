package proxy

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/e2e/world/pkgreg"
	"airlock/policies"
)

// lockedPolicy is a category that only its lockfiles restrict (no
// release age): what they do not list is hidden or denied.
const lockedPolicy = `
[categories.locked]
kind = "registries"
hosts = ["locked.example.test"]
ports = [REGPORT]
lockfiles = ["package-lock.json", "requirements.txt"]
`

// withLockfiles rebinds g's sandbox to a policy whose locked category
// has lockfiles naming gate-demo 1.0.0 (npm and PyPI) with the right
// digests, and gate-exempt 1.0.0 with a wrong one.
func (g *gateEnv) withLockfiles(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	tgz := g.reg.Artifact(pkgreg.NPMTarballPath("gate-demo", "1.0.0"))
	s512 := sha512.Sum512(tgz)
	wrong := sha512.Sum512([]byte("not the artifact"))
	lock := fmt.Sprintf(`{"name": "app", "lockfileVersion": 3, "packages": {"": {"name": "app"},
  "node_modules/gate-demo": {"version": "1.0.0", "integrity": "sha512-%s"},
  "node_modules/gate-exempt": {"version": "1.0.0", "integrity": "sha512-%s"}}}`,
		base64.StdEncoding.EncodeToString(s512[:]), base64.StdEncoding.EncodeToString(wrong[:]))
	whl := sha256.Sum256(g.reg.Artifact("/packages/" + pkgreg.WheelName("gate-demo", "1.0.0")))
	reqs := "gate-demo==1.0.0 --hash=sha256:" + hex.EncodeToString(whl[:]) + "\n"
	for name, body := range map[string]string{"package-lock.json": lock, "requirements.txt": reqs} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src := strings.ReplaceAll(gatePolicy+lockedPolicy, "REGPORT", fmt.Sprint(g.regPort))
	parsed, err := policies.Parse(filepath.Join(dir, "gate.toml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	*g.policy = *policies.Bind(parsed, worldOperator)
}

// TestPackageGateLockfiles: a category with lockfiles hides every
// version they do not list, denies its download (not_in_lockfile), and
// checks an artifact against the lockfile's digest (integrity_mismatch)
// — for real npm and pip installs too.
func TestPackageGateLockfiles(t *testing.T) {
	g := newGateEnv(t)
	g.withLockfiles(t)
	_, body := g.get(t, g.regURL("locked.example.test", "/gate-demo"), "")
	if strings.Contains(body, `"1.1.0"`) || strings.Contains(body, `"2.0.0"`) || !strings.Contains(body, `"1.0.0"`) {
		t.Errorf("packument: %s", body)
	}
	if why := gatedVersions(g.hostEvent(t, "locked.example.test", "/gate-demo"))["1.1.0"]; !strings.HasPrefix(why, "not_in_lockfile: npm:gate-demo@1.1.0") {
		t.Errorf("gated reason %q", why)
	}
	resp, body := g.get(t, g.regURL("locked.example.test", "/gate-demo/-/gate-demo-1.1.0.tgz"), "")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "not_in_lockfile: npm:gate-demo@1.1.0 is not in package-lock.json") {
		t.Errorf("unlocked download: %d %s", resp.StatusCode, body)
	}
	resp, _ = g.get(t, g.regURL("locked.example.test", "/gate-demo/-/gate-demo-1.0.0.tgz"), "")
	e := g.hostEvent(t, "locked.example.test", "/gate-demo/-/gate-demo-1.0.0.tgz")
	if resp.StatusCode != 200 || !strings.HasPrefix(e.HTTP.Package.Integrity, "sha512-") {
		t.Errorf("locked download: %d, integrity %q", resp.StatusCode, e.HTTP.Package.Integrity)
	}
	// The registry's own digest is right; the lockfile's is not: the
	// lockfile wins and the download is cut.
	req, _ := http.NewRequest(http.MethodGet, g.regURL("locked.example.test", "/gate-exempt/-/gate-exempt-1.0.0.tgz"), nil)
	if resp, err := g.explicitClient().Do(req); err == nil {
		_, err = readAllErr(resp)
		if err == nil {
			t.Error("an artifact that does not match the lockfile arrived whole")
		}
	}
	if e := g.hostEvent(t, "locked.example.test", "/gate-exempt/-/gate-exempt-1.0.0.tgz"); e.Rule != ruleIntegrity || !strings.HasPrefix(e.Reason, "integrity_mismatch") {
		t.Errorf("event %s %q", e.Rule, e.Reason)
	}
}

func readAllErr(resp *http.Response) (int, error) {
	defer resp.Body.Close()
	n := 0
	buf := make([]byte, 32<<10)
	for {
		m, err := resp.Body.Read(buf)
		n += m
		if err != nil {
			if err.Error() == "EOF" {
				return n, nil
			}
			return n, err
		}
	}
}

// TestPackageGateLockfilesClients: npm and pip install what the
// lockfiles list, not the newest version.
func TestPackageGateLockfilesClients(t *testing.T) {
	requireTool(t, "npm", "--version")
	requireTool(t, "python3", "-m", "pip", "--version")
	g := newGateEnv(t)
	g.withLockfiles(t)
	proj := filepath.Join(g.dir, "proj")
	os.MkdirAll(proj, 0o755)
	proxyURL := "http://" + g.explicit
	out, err := g.run(t, proj, "npm", "install", "--no-audit", "--no-fund", "--registry", g.regURL("locked.example.test", "/"),
		"--proxy", proxyURL, "--https-proxy", proxyURL, "--cafile", filepath.Join(g.dir, "ca.pem"), "gate-demo")
	if err != nil {
		t.Fatalf("npm install: %v\n%s", err, out)
	}
	if got := installedVersion(t, filepath.Join(proj, "node_modules", "gate-demo", "package.json")); got != "1.0.0" {
		t.Errorf("npm installed gate-demo@%s, want the locked 1.0.0", got)
	}
	target := filepath.Join(g.dir, "py")
	out, err = g.run(t, g.dir, "python3", "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir",
		"--target", target, "--index-url", g.regURL("locked.example.test", "/simple/"), "--proxy", proxyURL,
		"--cert", filepath.Join(g.dir, "ca.pem"), "gate-demo")
	if err != nil {
		t.Fatalf("pip install: %v\n%s", err, out)
	}
	if m, _ := filepath.Glob(filepath.Join(target, "gate_demo-1.0.0.dist-info")); len(m) != 1 {
		t.Errorf("pip did not install the locked gate-demo 1.0.0")
	}
}
