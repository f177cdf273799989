package serve

import (
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/client"
	"airlock/policies"
	"airlock/runner"
)

const malAdvisory = `{"id": "MAL-2026-0009", "summary": "Malicious code in left-pad-evil",
 "affected": [{"package": {"ecosystem": "npm", "name": "left-pad-evil"}, "versions": ["1.0.0"]}]}`

// TestAdvisoriesReload: [packages] osv loads at start and on reload; a
// list that no longer parses is rejected and the running one stays.
func TestAdvisoriesReload(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("MAL-2026-0009.json", malAdvisory)
	a := &Appliance{log: slog.New(slog.DiscardHandler), advisory: &advisories{dirs: []string{dir}, log: slog.New(slog.DiscardHandler)}}
	if err := a.advisory.load(); err != nil {
		t.Fatal(err)
	}
	evil := policies.Package{Ecosystem: "npm", Name: "left-pad-evil", Version: "1.0.0"}
	if _, ok := a.advisory.Advisories().Match(evil); !ok {
		t.Fatal("the advisory did not load")
	}
	write("MAL-2026-0010.json", strings.Replace(malAdvisory, "0009", "0010", 1)+"\n}")
	var res client.ReloadResult
	a.reloadAdvisories(&res)
	if len(res.Rejected) != 1 || res.Rejected[0].Name != "packages.osv" || !strings.Contains(strings.Join(res.Rejected[0].Errors, " "), "MAL-2026-0010.json:3:") {
		t.Errorf("reload result %+v", res)
	}
	if _, ok := a.advisory.Advisories().Match(evil); !ok {
		t.Error("a broken reload dropped the running list")
	}
	write("MAL-2026-0010.json", strings.Replace(strings.Replace(malAdvisory, "0009", "0010", 1), "left-pad-evil", "other-evil", -1))
	res = client.ReloadResult{}
	a.reloadAdvisories(&res)
	if _, ok := a.advisory.Advisories().Match(policies.Package{Ecosystem: "npm", Name: "other-evil", Version: "1.0.0"}); !ok || len(res.Rejected) != 0 {
		t.Errorf("the fixed list did not load: %+v", res)
	}
}

// lockedRegistry is a registry with a new store of sandbox lockfiles in
// dir.
func lockedRegistry(t *testing.T) (dir string, log *slog.Logger, locks *sandboxLocks, r *Registry) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "lockfiles")
	log = slog.New(slog.DiscardHandler)
	locks, err := openSandboxLocks(dir, log)
	if err != nil {
		t.Fatal(err)
	}
	r = NewRegistry()
	r.SetLocks(locks)
	return dir, log, locks, r
}

// TestSandboxLockfiles: lockfiles given at creation are read (a bad one
// is refused naming its file and line), reach the proxy with the
// sandbox's identity, are kept across an appliance restart, go with the
// sandbox, and a kept set that no longer reads leaves the sandbox with
// no network.
func TestSandboxLockfiles(t *testing.T) {
	_, err := parseLockfiles([]client.Lockfile{{Name: "app/requirements.txt", Content: "idna==3.6\n"}})
	if ae, ok := err.(*client.Error); !ok || ae.Code != client.CodeInvalid || !strings.Contains(ae.Message, "app/requirements.txt:1: idna: no --hash") {
		t.Fatalf("bad lockfile: %v", err)
	}
	if lk, err := parseLockfiles(nil); lk != nil || err != nil {
		t.Fatalf("no lockfiles: %v %v", lk, err)
	}
	lk, err := parseLockfiles([]client.Lockfile{{Name: "requirements.txt", Content: "idna==3.6 --hash=sha256:" + strings.Repeat("ab", 32) + "\n"}})
	if err != nil {
		t.Fatal(err)
	}
	dir, log, locks, r := lockedRegistry(t)
	a, b := netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("198.18.0.11")
	if err := locks.set("sb-1", lk); err != nil {
		t.Fatal(err)
	}
	r.Add("sb-1", a, nil)
	r.Add("sb-2", b, nil)
	idp := r.ProxyIdentifier()
	if sb, ok := idp.Identify(a); !ok || sb.Lock == nil || sb.Lock.Allows(policies.Package{Ecosystem: "pypi", Name: "idna", Version: "3.7"}) {
		t.Fatalf("locked sandbox: %+v %v", sb, ok)
	}
	if sb, ok := idp.Identify(b); !ok || sb.Lock != nil {
		t.Fatalf("a sandbox without lockfiles: %+v %v", sb, ok)
	}
	// A restarted appliance reads them back.
	again, err := openSandboxLocks(dir, log)
	if err != nil {
		t.Fatal(err)
	}
	if set, ok := again.lookup("sb-1"); !ok || !set.Allows(policies.Package{Ecosystem: "pypi", Name: "idna", Version: "3.6"}) || set.Allows(policies.Package{Ecosystem: "pypi", Name: "idna", Version: "3.7"}) {
		t.Fatalf("kept lockfiles: %v %v", set, ok)
	}
	// Gone with the sandbox, from memory and disk.
	r.Remove("sb-1")
	if _, err := os.Stat(filepath.Join(dir, "sb-1.json")); !os.IsNotExist(err) {
		t.Errorf("kept after removal: %v", err)
	}
	// Kept lockfiles that do not read: no network for that sandbox.
	if err := os.WriteFile(filepath.Join(dir, "sb-3.json"), []byte(`[{"name":"requirements.txt","content":"idna>=3\n"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	broken, err := openSandboxLocks(dir, log)
	if err != nil {
		t.Fatal(err)
	}
	r.SetLocks(broken)
	r.Add("sb-3", a, nil)
	if sb, ok := r.ProxyIdentifier().Identify(a); ok {
		t.Errorf("a sandbox whose kept lockfiles do not read is identified: %+v", sb)
	}
	if sb, ok := r.DNSIdentifier().Identify(a); ok {
		t.Errorf("a sandbox whose kept lockfiles do not read is identified by dnsd: %+v", sb)
	}
	broken.prune(func(id string) bool { return id != "sb-3" })
	if _, err := os.Stat(filepath.Join(dir, "sb-3.json")); !os.IsNotExist(err) {
		t.Errorf("a gone sandbox's lockfiles kept: %v", err)
	}
}

// TestSandboxLockfilesKeptNearTheBound: lockfiles full of <, & and >
// (which json.Marshal writes six bytes long) just under the bound are
// kept in a form that reads back on restart; a set whose kept form grows
// past the bound (U+2028 is written \u2028) is refused at creation, not
// left to cut the sandbox off at the next start. A sandbox registered
// before its lockfiles are set carries them from then on.
func TestSandboxLockfilesKeptNearTheBound(t *testing.T) {
	const hashed = "idna==3.6 --hash=sha256:" + "abababababababababababababababababababababababababababababababab" + "\n"
	line := "# " + strings.Repeat("<&>", 1000) + "\n"
	content := hashed + strings.Repeat(line, (maxSandboxLocks-64<<10)/len(line))
	lk, err := parseLockfiles([]client.Lockfile{{Name: "requirements.txt", Content: content}})
	if err != nil {
		t.Fatal(err)
	}
	dir, log, locks, r := lockedRegistry(t)
	addr := netip.MustParseAddr("198.18.0.12")
	r.Add("sb-1", addr, nil)
	if err := locks.set("sb-1", lk); err != nil {
		t.Fatal(err)
	}
	if sb, ok := r.ProxyIdentifier().Identify(addr); !ok || sb.Lock == nil {
		t.Fatalf("a sandbox registered before its lockfiles were set: %+v %v", sb, ok)
	}
	st, err := os.Stat(filepath.Join(dir, "sb-1.json"))
	if err != nil || st.Size() > maxSandboxLocks || st.Mode().Perm() != 0o600 {
		t.Fatalf("kept file: %v %v", st, err)
	}
	again, err := openSandboxLocks(dir, log)
	if err != nil {
		t.Fatal(err)
	}
	if set, ok := again.lookup("sb-1"); !ok || set == nil || !set.Allows(policies.Package{Ecosystem: "pypi", Name: "idna", Version: "3.6"}) ||
		set.Allows(policies.Package{Ecosystem: "pypi", Name: "idna", Version: "3.7"}) {
		t.Fatalf("kept lockfiles of %d bytes did not read back after a restart: %v %v", st.Size(), set, ok)
	}

	// Its description names them, never their content.
	a := &Appliance{policies: &policySet{refs: map[string]*policyRef{}}, secrets: newSecrets(), sbLocks: again}
	if d := a.describe(runner.Sandbox{ID: "sb-1"}); len(d.Lockfiles) != 1 || d.Lockfiles[0] != (client.SandboxLockfile{Name: "requirements.txt", Entries: 1}) {
		t.Errorf("described lockfiles %+v", d.Lockfiles)
	}
	if d := a.describe(runner.Sandbox{ID: "sb-other"}); d.Lockfiles != nil || d.Warnings != nil {
		t.Errorf("a sandbox without lockfiles: %+v %v", d.Lockfiles, d.Warnings)
	}
	if err := os.WriteFile(filepath.Join(dir, "sb-3.json"), []byte(`[{"name":"requirements.txt","content":"idna>=3\n"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	if a.sbLocks, err = openSandboxLocks(dir, log); err != nil {
		t.Fatal(err)
	}
	if d := a.describe(runner.Sandbox{ID: "sb-3"}); d.Lockfiles != nil || len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "it has no network") {
		t.Errorf("a sandbox whose kept lockfiles do not read: %+v %v", d.Lockfiles, d.Warnings)
	}
	os.Remove(filepath.Join(dir, "sb-3.json"))

	grows := hashed + strings.Repeat("# "+strings.Repeat("\u2028", 1000)+"\n", (maxSandboxLocks*6/10)/3002)
	lk, err = parseLockfiles([]client.Lockfile{{Name: "requirements.txt", Content: grows}})
	if err != nil {
		t.Fatal(err)
	}
	err = locks.set("sb-2", lk)
	if ae, ok := err.(*client.Error); !ok || ae.Code != client.CodeInvalid || !strings.Contains(ae.Message, "above the 16 MiB bound") {
		t.Fatalf("lockfiles whose kept form is above the bound: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sb-2.json")); !os.IsNotExist(err) {
		t.Errorf("refused lockfiles kept: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".tmp-*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
}
