package policies

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const lockPolicy = `version = 1
[categories.registries]
hosts = ["registry.example.test", "pypi.pkg.example.test"]
lockfiles = ["lock/package-lock.json", "lock/requirements.txt"]
`

func TestLockfileDecide(t *testing.T) {
	p, err := Parse("testdata/lock.toml", []byte(lockPolicy))
	if err != nil {
		t.Fatal(err)
	}
	get := func(host, path string) Verdict {
		return p.Decide(Request{Stage: StageHTTP, Method: "GET", Scheme: "https", Host: host, Port: 443, Path: path})
	}
	cases := []struct {
		host, path string
		want       Action
		reason     string
	}{
		{"registry.example.test", "/left-pad/-/left-pad-1.3.0.tgz", ActionAllow, ""},
		{"registry.example.test", "/left-pad/-/left-pad-1.1.0.tgz", ActionAllow, ""}, // nested under @acme/ui
		{"registry.example.test", "/@acme/ui/-/ui-2.0.0.tgz", ActionAllow, ""},
		{"registry.example.test", "/left-pad", ActionAllow, ""}, // metadata: the gate hides what is not locked
		{"registry.example.test", "/left-pad/-/left-pad-1.3.1.tgz", ActionDeny, "not_in_lockfile: npm:left-pad@1.3.1 is not in lock/package-lock.json"},
		{"registry.example.test", "/is-odd/-/is-odd-3.0.1.tgz", ActionDeny, "not_in_lockfile: npm:is-odd@3.0.1"},
		{"registry.example.test", "/local/-/local-0.0.1.tgz", ActionDeny, "not_in_lockfile"}, // a workspace link is not a registry package
		{"pypi.pkg.example.test", "/packages/aa/requests-2.31.0-py3-none-any.whl", ActionAllow, ""},
		{"pypi.pkg.example.test", "/packages/aa/requests-2.32.0-py3-none-any.whl", ActionDeny, "not_in_lockfile: pypi:requests@2.32.0 is not in lock/requirements.txt"},
		{"pypi.pkg.example.test", "/simple/requests/", ActionAllow, ""},
		{"registry.example.test", "/unknown/path/x", ActionDeny, "a category with lockfiles denies the rest"},
	}
	for _, c := range cases {
		v := get(c.host, c.path)
		if v.Action != c.want || !strings.Contains(v.Reason, c.reason) || c.want == ActionDeny && v.Rule.Name != "categories.registries.lockfiles" {
			t.Errorf("%s%s: %v by %s: %q", c.host, c.path, v.Action, v.Rule, v.Reason)
		}
	}
	ex := p.Explain(Request{Stage: StageHTTP, Method: "GET", Scheme: "https", Host: "registry.example.test", Port: 443, Path: "/left-pad"})
	if last := ex.Considered[len(ex.Considered)-1]; last.Rule.Name != "categories.registries.lockfiles" || !strings.Contains(last.Outcome, "not_in_lockfile") {
		t.Errorf("explain: %+v", ex.Considered)
	}
	lk := p.Categories()[0].Lock()
	if d := lk.Digests(Package{"pypi", "REQUESTS", "2.31.0"}); len(d) != 2 || !strings.HasPrefix(d[0], "sha256-") {
		t.Errorf("requests digests %v", d)
	}
	if d := lk.Digests(Package{"npm", "left-pad", "1.3.0"}); len(d) != 1 || !strings.HasPrefix(d[0], "sha512-") {
		t.Errorf("left-pad digests %v", d)
	}
	if !lk.Locks("npm") || !lk.Locks("pypi") || lk.Locks("go") {
		t.Error("locked ecosystems")
	}
}

func TestLockfileErrors(t *testing.T) {
	cases := map[string]string{
		"lock/bad/unpinned.txt":             `lock/bad/unpinned.txt:2: "requests>=2.0": not pinned: want NAME==VERSION`,
		"lock/bad/nohash.txt":               `lock/bad/nohash.txt:1: idna: no --hash=sha256:…`,
		"lock/bad/editable.txt":             `lock/bad/editable.txt:3: -e: an option a lockfile cannot hold`,
		"lock/bad/badhash.txt":              `lock/bad/badhash.txt:1: "--hash=sha256:abcd": not a sha256 digest`,
		"lock/bad/package-lock.json":        `lock/bad/package-lock.json:4: x: bad integrity "sha512-nope"`,
		"lock/bad/syntax/package-lock.json": `lock/bad/syntax/package-lock.json:3:16: invalid character ','`,
		"lock/missing/package-lock.json":    `no such file`,
		"../lock/package-lock.json":         `must be inside the policy's directory`,
		"lock/yarn.lock":                    `not a lockfile Airlock reads`,
	}
	for f, want := range cases {
		src := strings.Replace(lockPolicy, `["lock/package-lock.json", "lock/requirements.txt"]`, `["`+f+`"]`, 1)
		_, err := Parse("testdata/lock.toml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), "testdata/lock.toml:4:") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v\nwant %s", f, err, want)
		}
	}
}

func FuzzLockfile(f *testing.F) {
	for _, name := range []string{"package-lock.json", "requirements.txt", "bad/unpinned.txt", "bad/package-lock.json",
		"uv.lock", "poetry.lock", "bad/uv.lock", "bad/poetry.lock", "bad/syntax/uv.lock"} {
		b, err := os.ReadFile(filepath.Join("testdata/lock", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(filepath.Base(name), b)
	}
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		switch name {
		case "package-lock.json", "uv.lock", "poetry.lock":
		case "lockfile": // told by content
			set, err := ParseLockfiles([]Lockfile{{Name: name, Data: data}}, Rule{Name: "sandbox.lockfiles"})
			if err != nil && !strings.HasPrefix(err.Error(), name) || err == nil && len(set.Files()) != 1 {
				t.Fatalf("set %v, error %v", set, err)
			}
			return
		default:
			name = "requirements.txt"
		}
		s := &LockSet{pkgs: map[string]map[string][]string{}, ecos: map[string]string{}}
		if err := s.parse(name, data); err != nil && !strings.HasPrefix(err.Error(), name) {
			t.Fatalf("error without the file: %v", err)
		}
	})
}

// TestLockfilePythonTOML: uv.lock and poetry.lock allow their registry
// packages with every artifact's digest, and skip the project itself,
// paths and git checkouts.
func TestLockfilePythonTOML(t *testing.T) {
	for _, name := range []string{"uv.lock", "poetry.lock"} {
		data, err := os.ReadFile(filepath.Join("testdata/lock", name))
		if err != nil {
			t.Fatal(err)
		}
		set, err := ParseLockfiles([]Lockfile{{Name: "app/" + name, Data: data}}, Rule{Name: "sandbox.lockfiles"})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d := set.Digests(Package{"pypi", "requests", "2.31.0"}); len(d) != 2 || !strings.HasPrefix(d[0], "sha256-") {
			t.Errorf("%s: requests digests %v", name, d)
		}
		if d := set.Digests(Package{"pypi", "IDNA", "3.6"}); len(d) != 1 {
			t.Errorf("%s: idna digests %v", name, d)
		}
		for _, p := range []Package{{"pypi", "requests", "2.32.0"}, {"pypi", "app", "0.1.0"}, {"pypi", "tool", "1.0.0"}, {"pypi", "local-lib", "0.1.0"}} {
			if set.Allows(p) {
				t.Errorf("%s: allows %v", name, p)
			}
		}
		if got := set.Reason(Package{"pypi", "idna", "3.7"}); got != "not_in_lockfile: pypi:idna@3.7 is not in app/"+name {
			t.Errorf("%s: reason %q", name, got)
		}
		if set.Locks("npm") || !set.Locks("pypi") || set.Rule().Name != "sandbox.lockfiles" {
			t.Errorf("%s: locks npm %v, pypi %v, rule %v", name, set.Locks("npm"), set.Locks("pypi"), set.Rule())
		}
	}
}

// TestParseLockfiles: lockfiles given by content are told apart by name,
// else by content, and every error names the file and the line.
func TestParseLockfiles(t *testing.T) {
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("testdata/lock", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	set, err := ParseLockfiles([]Lockfile{{"web/lock.json", read("package-lock.json")}, {"py.lock", read("uv.lock")},
		{"reqs.in", read("requirements.txt")}, {"deps.lock", read("poetry.lock")}}, Rule{Name: "sandbox.lockfiles"})
	if err != nil {
		t.Fatal(err)
	}
	if !set.Allows(Package{"npm", "left-pad", "1.3.0"}) || set.Allows(Package{"npm", "left-pad", "1.3.1"}) ||
		!set.Allows(Package{"pypi", "idna", "3.6"}) || len(set.Files()) != 4 {
		t.Errorf("set from content: files %v", set.Files())
	}
	if got := set.Reason(Package{"pypi", "x", "1"}); !strings.Contains(got, "py.lock, reqs.in, deps.lock") {
		t.Errorf("reason %q", got)
	}
	cases := []struct {
		name, data, want string
	}{
		{"bad/uv.lock", string(read("bad/uv.lock")), `bad/uv.lock:8: nohash 1.0: hash "md5:abcd": want sha256:HEX`},
		{"bad/syntax/uv.lock", string(read("bad/syntax/uv.lock")), `bad/syntax/uv.lock:5:`},
		{"bad/poetry.lock", string(read("bad/poetry.lock")), `bad/poetry.lock:7: [metadata] lock-version "3.0": want 1.x or 2.x`},
		{"uv.lock", "version = 2\n", `uv.lock:1: want ` + "`version = 1`"},
		{"uv.lock", "version = 1\n[[package]]\nname = 3\n", `uv.lock:3: package.name: incompatible types`},
		{"uv.lock", "version = 1\n\n[[package]]\nname = \"a b\"\nversion = \"1\"\n", `uv.lock:3: [[package]] "a b" "1": want a name and a pinned version`},
		{"poetry.lock", "[[package]]\nname = \"x\"\nversion = \"1\"\n\n[metadata]\nlock-version = \"1.1\"\n", `poetry.lock:1: x 1: no artifact hashes`},
		{"notes.md", "hello\n", `notes.md: not a lockfile Airlock reads`},
		{"a.lock", "{\"lockfileVersion\": 4}", `a.lock:1: lockfileVersion 4: want 1, 2 or 3`},
		{"x.lock", "a==1 --hash=sha256:00\n", `x.lock:1: "--hash=sha256:00": not a sha256 digest`},
		{"", "{}", `lockfile 1: want a name`},
		{"a\nb", "{}", `lockfile 1: want a name`},
	}
	for _, c := range cases {
		_, err := ParseLockfiles([]Lockfile{{c.name, []byte(c.data)}}, Rule{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		}
	}
	if set, err := ParseLockfiles(nil, Rule{}); set != nil || err != nil {
		t.Errorf("no lockfiles: %v %v", set, err)
	}
}

// TestLockfileInHash: a changed lockfile changes the policy's hash, so a
// reload picks it up although the policy file is the same.
func TestLockfileInHash(t *testing.T) {
	dir := t.TempDir()
	src := []byte("version = 1\n[categories.registries]\nhosts = [\"registry.example.test\"]\nlockfiles = [\"requirements.txt\"]\n")
	hash := func(req string) string {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "requirements.txt"), []byte(req), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := Parse(filepath.Join(dir, "p.toml"), src)
		if err != nil {
			t.Fatal(err)
		}
		return p.Hash()
	}
	h := "--hash=sha256:" + strings.Repeat("ab", 32) + "\n"
	a, b := hash("idna==3.6 "+h), hash("idna==3.7 "+h)
	if a == b || a != hash("idna==3.6 "+h) {
		t.Errorf("hashes %s %s", a, b)
	}
}

// TestLockedSandboxRefusesSplicedRegistries: a sandbox created with
// lockfiles cannot reach a registries category that is not inspected
// (its downloads would be spliced past the lockfiles), and is refused
// naming the sandbox's lockfiles rule; an inspected one, or a sandbox
// without lockfiles, is allowed as before.
func TestLockedSandboxRefusesSplicedRegistries(t *testing.T) {
	p, err := Parse("p.toml", []byte(`version = 1
[categories.spliced]
kind = "registries"
hosts = ["spliced.example.test"]
inspect = false
publish = true
[categories.inspected]
kind = "registries"
hosts = ["inspected.example.test"]
`))
	if err != nil {
		t.Fatal(err)
	}
	lock, err := ParseLockfiles([]Lockfile{{Name: "requirements.txt", Data: []byte("idna==3.6 --hash=sha256:" + strings.Repeat("ab", 32) + "\n")}},
		Rule{Name: "sandbox.lockfiles"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host string
		lock *LockSet
		want Action
	}{
		{"spliced.example.test", lock, ActionDeny},
		{"spliced.example.test", nil, ActionAllow},
		{"inspected.example.test", lock, ActionAllow},
	} {
		v := p.Decide(Request{Stage: StageConnect, Host: c.host, Port: 443, Lock: c.lock})
		if v.Action != c.want {
			t.Errorf("%s (lockfiles %v): %v by %s (%s), want %v", c.host, c.lock != nil, v.Action, v.Rule.Name, v.Reason, c.want)
		}
		if c.want == ActionDeny && (v.Rule.Name != "sandbox.lockfiles" || !strings.Contains(v.Reason, "inspect = false")) {
			t.Errorf("%s: refused by %s (%s), want the sandbox's lockfiles rule", c.host, v.Rule.Name, v.Reason)
		}
	}
}

// TestLockfileBounds: a request cannot make the parser work without
// bound: more than MaxLockfiles lockfiles are refused, and so is a
// requirement continued with backslashes past its bound (it was joined by
// copying the whole line again for each continuation).
func TestLockfileBounds(t *testing.T) {
	many := make([]Lockfile, MaxLockfiles+1)
	for i := range many {
		many[i] = Lockfile{Name: fmt.Sprintf("r%d/requirements.txt", i)}
	}
	if _, err := ParseLockfiles(many, Rule{}); err == nil || !strings.Contains(err.Error(), "at most 64") {
		t.Errorf("%d lockfiles: %v", len(many), err)
	}
	cont := []byte(strings.Repeat("\\\n", 200_000) + "idna==3.6\n")
	if _, err := ParseLockfiles([]Lockfile{{Name: "requirements.txt", Data: cont}}, Rule{}); err == nil || !strings.Contains(err.Error(), "requirements.txt:1: a requirement continued over more than") {
		t.Errorf("a continued requirement: %v", err)
	}
	ok := []byte("idna==3.6 \\\n    --hash=sha256:" + strings.Repeat("ab", 32) + "\n")
	if set, err := ParseLockfiles([]Lockfile{{Name: "requirements.txt", Data: ok}}, Rule{}); err != nil || !set.Allows(Package{Ecosystem: "pypi", Name: "idna", Version: "3.6"}) {
		t.Errorf("a requirement continued once: %v", err)
	}
}

// TestLockfileTOMLLines: an error in a uv.lock or poetry.lock is at the
// line of the [[package]] or key it is about, not at a key of the same
// name elsewhere (toml's own decoding placed every [[package]]'s key at
// the last package's, and a scan for "version =" found a package's).
func TestLockfileTOMLLines(t *testing.T) {
	h := `"sha256:` + strings.Repeat("ab", 32) + `"`
	for _, c := range []struct{ name, data, want string }{
		{"uv.lock", "version = 1\n[[package]]\nname = 3\n[[package]]\nname = \"b\"\n", "uv.lock:3: package.name: incompatible types: want a string, got an integer"},
		{"uv.lock", "[[package]]\nname = \"a\"\nversion = \"1\"\n", "uv.lock:1: want `version = 1`"},
		{"uv.lock", "version = 1\npackage = [\n  {name = \"a\", version = \"1\", wheels = [{hash = \"md5:1\"}]},\n]\n", `uv.lock:3: a 1: hash "md5:1"`},
		{"uv.lock", "version = 1\n[[package]]\nname = \"a\"\nversion = \"1\"\nwheels = [{hash = " + h + "}]\n[[package]]\nname = \"b\"\nversion = \"1\"\nwheels = [\n  {hash = " + h + "},\n  {hash = 7},\n]\n",
			"uv.lock:11: package.wheels.hash: incompatible types: want a string, got an integer"},
		{"poetry.lock", "[[package]]\nname = \"a\"\nversion = \"1\"\n[metadata]\nlock-version = \"1.1\"\n[metadata.files]\nb = []\na = [\n  {hash = false},\n]\n", "poetry.lock:9: metadata.files.a.hash: incompatible types: want a string, got a boolean"},
		{"poetry.lock", "[[package]]\nname = \"a\"\nversion = \"1\"\n\n[metadata]\npython-versions = \"*\"\n", `poetry.lock:5: [metadata] lock-version "": want 1.x or 2.x`},
	} {
		_, err := ParseLockfiles([]Lockfile{{c.name, []byte(c.data)}}, Rule{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v\nwant %s", c.data, err, c.want)
		}
	}
}

// TestLockedSandboxHTTP: on the http stage the lockfiles a sandbox was
// created with (Request.Lock) restrict every registries category for it:
// a version they do not list is denied (not_in_lockfile) by the
// sandbox's rule, so is a path that is neither a package nor metadata;
// metadata, listed versions and unlocked ecosystems pass; an audit
// category records would_deny; the category's own denials come first;
// without lockfiles nothing changes.
func TestLockedSandboxHTTP(t *testing.T) {
	p, err := Parse("p.toml", []byte(`version = 1
[categories.npm]
kind = "registries"
hosts = ["registry.example.test"]
packages.deny = ["npm:evil-pad"]
[categories.plain]
kind = "registries"
hosts = ["plain.example.test"]
[categories.watched]
kind = "registries"
hosts = ["watched.example.test"]
mode = "audit"
`))
	if err != nil {
		t.Fatal(err)
	}
	sri := "sha512-" + base64.StdEncoding.EncodeToString(make([]byte, 64))
	lock, err := ParseLockfiles([]Lockfile{{Name: "web/package-lock.json", Data: []byte(`{"lockfileVersion": 3, "packages": {"": {},
 "node_modules/left-pad": {"version": "1.3.0", "integrity": "` + sri + `"},
 "node_modules/evil-pad": {"version": "1.0.0", "integrity": "` + sri + `"}}}`)}}, Rule{Name: "sandbox.lockfiles"})
	if err != nil {
		t.Fatal(err)
	}
	const unrecognized = "not_in_lockfile: path is not a package download or metadata request categories.plain recognizes; lockfiles deny the rest"
	for _, c := range []struct {
		name, host, path string
		lock             *LockSet
		want             Action
		wouldDeny        bool
		rule, reason     string
	}{
		{"listed version", "registry.example.test", "/left-pad/-/left-pad-1.3.0.tgz", lock, ActionAllow, false, "", ""},
		{"metadata", "registry.example.test", "/left-pad", lock, ActionAllow, false, "", ""},
		{"unlocked ecosystem", "registry.example.test", "/packages/idna-3.7-py3-none-any.whl", lock, ActionAllow, false, "", ""},
		{"unlisted version", "registry.example.test", "/left-pad/-/left-pad-1.3.1.tgz", lock, ActionDeny, false,
			"sandbox.lockfiles", "not_in_lockfile: npm:left-pad@1.3.1 is not in web/package-lock.json"},
		{"unreadable path", "plain.example.test", "/odd/layout/left-pad.tgz", lock, ActionDeny, false, "sandbox.lockfiles", unrecognized},
		{"the category's deny first", "registry.example.test", "/evil-pad/-/evil-pad-1.0.0.tgz", lock, ActionDeny, false,
			"categories.npm.packages.deny[0]", "package npm:evil-pad matches npm:evil-pad"},
		{"audit category", "watched.example.test", "/left-pad/-/left-pad-1.3.1.tgz", lock, ActionAudit, true,
			"sandbox.lockfiles", "not_in_lockfile: npm:left-pad@1.3.1 is not in web/package-lock.json"},
		{"no lockfiles", "registry.example.test", "/left-pad/-/left-pad-1.3.1.tgz", nil, ActionAllow, false, "", ""},
		{"the category's deny of an unreadable path first", "registry.example.test", "/odd/layout/left-pad.tgz", lock, ActionDeny, false,
			"categories.npm.packages", "path is not a package download or metadata request categories.npm recognizes; a category with packages rules denies the rest (set path_prefix if the registry sits under a prefix)"},
		{"no lockfiles, unreadable path", "plain.example.test", "/odd/layout/left-pad.tgz", nil, ActionAllow, false, "", ""},
	} {
		v := p.Decide(Request{Stage: StageHTTP, Method: "GET", Scheme: "https", Host: c.host, Path: c.path, Lock: c.lock})
		if v.Action != c.want || v.WouldDeny != c.wouldDeny {
			t.Errorf("%s: %v (would_deny %v) by %s (%s), want %v (would_deny %v)", c.name, v.Action, v.WouldDeny, v.Rule.Name, v.Reason, c.want, c.wouldDeny)
		}
		if c.rule != "" && (v.Rule.Name != c.rule || v.Reason != c.reason) {
			t.Errorf("%s: rule %s (%q), want %s (%q)", c.name, v.Rule.Name, v.Reason, c.rule, c.reason)
		}
	}
}

// TestLockSetEntries: a set names the lockfiles it was read from, each
// with the entries it has.
func TestLockSetEntries(t *testing.T) {
	sri := "sha512-" + base64.StdEncoding.EncodeToString(make([]byte, 64))
	set, err := ParseLockfiles([]Lockfile{
		{Name: "web/package-lock.json", Data: []byte(`{"lockfileVersion": 3, "packages": {"": {},
 "node_modules/left-pad": {"version": "1.3.0", "integrity": "` + sri + `"},
 "node_modules/a/node_modules/left-pad": {"version": "1.2.0", "integrity": "` + sri + `"},
 "node_modules/evil-pad": {"version": "1.0.0", "integrity": "` + sri + `"}}}`)},
		{Name: "requirements.txt", Data: []byte("idna==3.6 --hash=sha256:" + strings.Repeat("ab", 32) + "\n")},
	}, Rule{Name: "sandbox.lockfiles"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(set.Files(), set.Entries()), "[web/package-lock.json requirements.txt] [3 1]"; got != want {
		t.Errorf("files and entries %s, want %s", got, want)
	}
	var none *LockSet
	if none.Files() != nil || none.Entries() != nil {
		t.Error("a nil set names lockfiles")
	}
}
