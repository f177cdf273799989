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
	"sync/atomic"
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

// npmLock is a package-lock.json (v3) naming gate-demo VERSION with its
// tarball's digest and gate-exempt 1.0.0 with a wrong one.
func (g *gateEnv) npmLock(version string) string {
	tgz := sha512.Sum512(g.reg.Artifact(pkgreg.NPMTarballPath("gate-demo", version)))
	wrong := sha512.Sum512([]byte("not the artifact"))
	return fmt.Sprintf(`{"name": "app", "lockfileVersion": 3, "packages": {"": {"name": "app"},
  "node_modules/gate-demo": {"version": %q, "integrity": "sha512-%s"},
  "node_modules/gate-exempt": {"version": "1.0.0", "integrity": "sha512-%s"}}}`,
		version, base64.StdEncoding.EncodeToString(tgz[:]), base64.StdEncoding.EncodeToString(wrong[:]))
}

// withLockfiles rebinds g's sandbox to a policy whose locked category
// has lockfiles naming gate-demo 1.0.0 (npm and PyPI) with the right
// digests, and gate-exempt 1.0.0 with a wrong one.
func (g *gateEnv) withLockfiles(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	lock := g.npmLock("1.0.0")
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
	g.cutShort(t, "locked.example.test", "/gate-exempt/-/gate-exempt-1.0.0.tgz", "integrity_mismatch: gate-exempt@1.0.0")
}

// cutShort fetches an artifact that does not match its digest: it must
// not arrive whole, and its event is the integrity denial (reason
// starting with want).
func (g *gateEnv) cutShort(t *testing.T, host, path, want string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, g.regURL(host, path), nil)
	if resp, err := g.explicitClient().Do(req); err == nil {
		if n, err := readAllErr(resp); err == nil {
			t.Errorf("%s%s arrived whole (%d bytes) though it does not match its digest", host, path, n)
		}
	}
	if e := g.hostEvent(t, host, path); e.Rule != ruleIntegrity || !strings.HasPrefix(e.Reason, want) {
		t.Errorf("%s%s: event %s %q, want %s %s…", host, path, e.Rule, e.Reason, ruleIntegrity, want)
	}
}

// installsGateDemo installs gate-demo from host with real npm and pip
// through the proxy and checks the versions they installed.
func (g *gateEnv) installsGateDemo(t *testing.T, host, npmWant, pipWant string) {
	t.Helper()
	proj := filepath.Join(g.dir, "proj-"+host)
	os.MkdirAll(proj, 0o755)
	proxyURL := "http://" + g.explicit
	out, err := g.run(t, proj, "npm", "install", "--no-audit", "--no-fund", "--registry", g.regURL(host, "/"),
		"--proxy", proxyURL, "--https-proxy", proxyURL, "--cafile", filepath.Join(g.dir, "ca.pem"), "gate-demo")
	if err != nil {
		t.Fatalf("npm install: %v\n%s", err, out)
	}
	if got := installedVersion(t, filepath.Join(proj, "node_modules", "gate-demo", "package.json")); got != npmWant {
		t.Errorf("npm installed gate-demo@%s, want the locked %s", got, npmWant)
	}
	target := filepath.Join(g.dir, "py-"+host)
	out, err = g.run(t, g.dir, "python3", "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir",
		"--target", target, "--index-url", g.regURL(host, "/simple/"), "--proxy", proxyURL,
		"--cert", filepath.Join(g.dir, "ca.pem"), "gate-demo")
	if err != nil {
		t.Fatalf("pip install: %v\n%s", err, out)
	}
	if m, _ := filepath.Glob(filepath.Join(target, "gate_demo-"+pipWant+".dist-info")); len(m) != 1 {
		t.Errorf("pip did not install the locked gate-demo %s", pipWant)
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
	g.installsGateDemo(t, "locked.example.test", "1.0.0", "1.0.0")
}

// sandboxLocks are lockfiles given at sandbox creation (by content, as
// the API takes them): npm's package-lock.json pins gate-demo 1.1.0 and
// gate-exempt 1.0.0 with a wrong digest, a uv.lock pins the PyPI
// gate-demo 1.0.0.
func (g *gateEnv) sandboxLocks(t *testing.T) *policies.LockSet {
	t.Helper()
	lock := g.npmLock("1.1.0")
	whl := sha256.Sum256(g.reg.Artifact("/packages/" + pkgreg.WheelName("gate-demo", "1.0.0")))
	uv := fmt.Sprintf("version = 1\n\n[[package]]\nname = \"gate-demo\"\nversion = \"1.0.0\"\nsource = { registry = \"https://plain.example.test/simple\" }\n"+
		"wheels = [{ url = \"https://plain.example.test/x.whl\", hash = \"sha256:%s\" }]\n", hex.EncodeToString(whl[:]))
	set, err := policies.ParseLockfiles([]policies.Lockfile{{Name: "web/package-lock.json", Data: []byte(lock)}, {Name: "py.lock", Data: []byte(uv)}},
		policies.Rule{Name: "sandbox.lockfiles"})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestPackageGateSandboxLockfiles: lockfiles given with the sandbox
// restrict every registries category for it, as a category's own do:
// versions they do not list are hidden and denied (not_in_lockfile),
// artifacts must match their digests, unreadable registry paths are
// denied; real npm and pip install the locked versions. The same
// category without the sandbox's lockfiles is not restricted.
func TestPackageGateSandboxLockfiles(t *testing.T) {
	requireTool(t, "npm", "--version")
	requireTool(t, "python3", "-m", "pip", "--version")
	var lock atomic.Pointer[policies.LockSet]
	g := newGateEnvWith(t, gateOpts{lock: lock.Load, cache: openTestCache(t, t.TempDir(), 64<<20)})
	lock.Store(g.sandboxLocks(t))

	_, body := g.get(t, g.regURL("plain.example.test", "/gate-demo"), "")
	if strings.Contains(body, `"1.0.0"`) || strings.Contains(body, `"2.0.0"`) || !strings.Contains(body, `"1.1.0"`) {
		t.Errorf("packument: %s", body)
	}
	if why := gatedVersions(g.hostEvent(t, "plain.example.test", "/gate-demo"))["2.0.0"]; why != "not_in_lockfile: npm:gate-demo@2.0.0 is not in web/package-lock.json" {
		t.Errorf("gated reason %q", why)
	}
	resp, body := g.get(t, g.regURL("plain.example.test", "/gate-demo/-/gate-demo-2.0.0.tgz"), "")
	e := g.hostEvent(t, "plain.example.test", "/gate-demo/-/gate-demo-2.0.0.tgz")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "not_in_lockfile: npm:gate-demo@2.0.0 is not in web/package-lock.json") ||
		e.Rule != "sandbox.lockfiles" || e.Verdict != "deny" {
		t.Errorf("unlocked download: %d %s; event %s %s %q", resp.StatusCode, body, e.Verdict, e.Rule, e.Reason)
	}
	resp, body = g.get(t, g.regURL("plain.example.test", "/packages/"+pkgreg.WheelName("gate-demo", "2.0.0")), "")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "not_in_lockfile: pypi:gate-demo@2.0.0 is not in py.lock") {
		t.Errorf("unlocked wheel: %d %s", resp.StatusCode, body)
	}
	resp, body = g.get(t, g.regURL("plain.example.test", "/odd/layout/gate-demo.tgz"), "")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "not_in_lockfile: path is not a package download or metadata request") {
		t.Errorf("unreadable path: %d %s", resp.StatusCode, body)
	}
	g.cutShort(t, "plain.example.test", "/gate-exempt/-/gate-exempt-1.0.0.tgz", "integrity_mismatch: gate-exempt@1.0.0")
	g.installsGateDemo(t, "plain.example.test", "1.1.0", "1.0.0")

	// Without the sandbox's lockfiles the category is open again, and the
	// document cached for the locked sandbox is not reused.
	lock.Store(nil)
	if _, body := g.get(t, g.regURL("plain.example.test", "/gate-demo"), ""); !strings.Contains(body, `"2.0.0"`) {
		t.Errorf("packument without lockfiles: %s", body)
	}
	if resp, _ := g.get(t, g.regURL("plain.example.test", "/gate-demo/-/gate-demo-2.0.0.tgz"), ""); resp.StatusCode != 200 {
		t.Errorf("download without lockfiles: %d", resp.StatusCode)
	}
}

// TestPackageGateSandboxLockfilesAudit: in an audit category a version
// the sandbox's lockfiles do not list is downloaded and recorded as the
// lockfiles' would_deny (not as the release-age gate's, which would also
// deny it); an unreadable path too.
func TestPackageGateSandboxLockfilesAudit(t *testing.T) {
	var lock atomic.Pointer[policies.LockSet]
	g := newGateEnvWith(t, gateOpts{lock: lock.Load})
	lock.Store(g.sandboxLocks(t))
	for _, c := range []struct{ path, reason string }{
		{"/gate-demo/-/gate-demo-2.0.0.tgz", "not_in_lockfile: npm:gate-demo@2.0.0 is not in web/package-lock.json"},
		{"/odd/layout/gate-demo.tgz", "not_in_lockfile: path is not a package download or metadata request categories.audited recognizes"},
	} {
		resp, _ := g.get(t, g.regURL("audit.example.test", c.path), "")
		e := g.hostEvent(t, "audit.example.test", c.path)
		if resp.StatusCode == http.StatusForbidden || e.Verdict != "audit" || !e.WouldDeny || e.Rule != "sandbox.lockfiles" || !strings.HasPrefix(e.Reason, c.reason) {
			t.Errorf("%s: %d; event %s would_deny %v %s %q", c.path, resp.StatusCode, e.Verdict, e.WouldDeny, e.Rule, e.Reason)
		}
	}
}
