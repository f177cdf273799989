package e2e

import (
	"context"
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"airlock/client"
	"airlock/e2e/world"
	"airlock/e2e/world/pkgreg"
)

// gateSteps: the registries category's min_release_age = "72h" holds for
// the clients in the sandbox, whatever their own settings: npm and pip
// install the newest version older than the gate, a pinned younger one
// is not installable, and its direct download is refused naming its
// publish time.
func (s *scenario) gateSteps(npmReg, pypi string) {
	s.step("npm install takes the newest version older than the release-age gate",
		"mkdir -p /tmp/gateproj && cd /tmp/gateproj && npm install --no-audit --no-fund --registry "+npmReg+" gate-demo && node -e 'console.log(require(\"gate-demo\"))'",
		func(r result) []string {
			return expect(r.code == 0, "npm install failed",
				strings.Contains(r.stdout, "gate-demo@1.1.0"), "npm did not install gate-demo@1.1.0, the newest version older than 72h")
		})
	// The appliance's package cache ([packages.cache]) kept the verified
	// tarball: an install with an empty npm cache gets it from there.
	wmark := s.w.Mark()
	s.step("a second npm install of the same package is served from the appliance's package cache",
		"mkdir -p /tmp/gateproj2 && cd /tmp/gateproj2 && npm install --no-audit --no-fund --cache /tmp/npm-cache2 --registry "+npmReg+" gate-demo && node -e 'console.log(require(\"gate-demo\"))'",
		func(r result) []string {
			got := s.w.Since(wmark, world.ByRole(world.RoleNPM), world.Containing("gate-demo-1.1.0.tgz"))
			return expect(r.code == 0, "npm install failed",
				strings.Contains(r.stdout, "gate-demo@1.1.0"), "npm did not install gate-demo@1.1.0",
				len(got) == 0, "the registry served the tarball again (the cache did not):\n"+records(got))
		})
	s.step("npm install of a version younger than the gate fails",
		"cd /tmp/gateproj && npm install --no-audit --no-fund --registry "+npmReg+" gate-demo@2.0.0",
		func(r result) []string {
			got := s.w.Since(0, world.ByRole(world.RoleNPM), world.Containing("gate-demo-2.0.0.tgz"))
			return expect(r.code != 0, "npm installed gate-demo@2.0.0",
				len(got) == 0, "the registry served the too-new tarball:\n"+records(got))
		})
	s.refusal("a direct download of a version younger than the gate is refused with its publish time",
		"curl -sS -m 20 "+npmReg+"gate-demo/-/gate-demo-2.0.0.tgz",
		[]string{"package_too_new"},
		func(r result, wmark uint64) []string {
			got := s.w.Since(wmark, world.ByRole(world.RoleNPM), world.Containing("gate-demo-2.0.0.tgz"))
			return expect(strings.Contains(r.stdout, "package_too_new: gate-demo@2.0.0 was published "), "the refusal does not name package_too_new and the publish time",
				len(got) == 0, "the registry served the too-new tarball:\n"+records(got))
		})
	s.step("npm install skips the version the appliance's malicious-package advisory names",
		"cd /tmp/gateproj && npm install --no-audit --no-fund --registry "+npmReg+" gate-mal && node -e 'console.log(require(\"gate-mal\"))'",
		func(r result) []string {
			return expect(r.code == 0, "npm install failed",
				strings.Contains(r.stdout, "gate-mal@1.0.0"), "npm did not install gate-mal@1.0.0 (1.0.1 is "+world.GatedAdvisoryID+")")
		})
	s.refusal("a direct download of a malicious version is refused naming the advisory",
		"curl -sS -m 20 "+npmReg+"gate-mal/-/gate-mal-1.0.1.tgz",
		[]string{"osv:" + world.GatedAdvisoryID},
		func(r result, wmark uint64) []string {
			got := s.w.Since(wmark, world.ByRole(world.RoleNPM), world.Containing("gate-mal-1.0.1.tgz"))
			return expect(strings.Contains(r.stdout, "osv:"+world.GatedAdvisoryID), "the refusal does not name the advisory",
				len(got) == 0, "the registry served the malicious tarball:\n"+records(got))
		})
	if r, _ := s.sb.run(context.Background(), "python3 -m pip --version", nil); r.code != 0 {
		return // the pip steps above already skipped with the reason
	}
	s.step("pip install takes the newest version older than the release-age gate",
		"python3 -m pip install -q --disable-pip-version-check --no-cache-dir --target /tmp/gatepy --index-url "+pypi+" gate-demo && PYTHONPATH=/tmp/gatepy python3 -c 'import gate_demo; print(gate_demo.VALUE)'",
		func(r result) []string {
			return expect(r.code == 0, "pip install failed", strings.Contains(r.stdout, "gate-demo==1.0.0"), "pip did not install gate-demo 1.0.0")
		})
}

// lockfileSteps: a sandbox created with a package-lock.json (given by
// content, as `airlock sandbox create --lockfile` sends it) that pins
// gate-demo 1.0.0 with its digest installs 1.0.0 with npm, not the
// gate's newest mature 1.1.0 that the scenario's sandbox got, and a
// direct download of 1.1.0 is refused with not_in_lockfile.
func lockfileSteps(t *testing.T, a *appliance, w *world.World, npmReg string) {
	reg, err := pkgreg.New(w.URL(world.RoleNPM), append([]pkgreg.Package(nil), world.GatedNPM...), nil)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha512.Sum512(reg.Artifact(pkgreg.NPMTarballPath("gate-demo", "1.0.0")))
	lock := fmt.Sprintf(`{"name": "app", "lockfileVersion": 3, "packages": {"": {"name": "app"},
  "node_modules/gate-demo": {"version": "1.0.0", "integrity": "sha512-%s"}}}`, base64.StdEncoding.EncodeToString(sum[:]))
	lsb := a.newSandbox(t, false, func(r *client.CreateRequest) {
		r.Lockfiles = []client.Lockfile{{Name: "app/package-lock.json", Content: lock}}
	})
	s := &scenario{t: t, w: w, sb: lsb}
	s.step("a sandbox created with a lockfile installs the locked version",
		"mkdir -p /tmp/lockproj && cd /tmp/lockproj && npm install --no-audit --no-fund --registry "+npmReg+" gate-demo && node -e 'console.log(require(\"gate-demo\"))'",
		func(r result) []string {
			return expect(r.code == 0, "npm install failed",
				strings.Contains(r.stdout, "gate-demo@1.0.0"), "npm did not install gate-demo@1.0.0, the version the sandbox's lockfile pins")
		})
	s.refusal("a sandbox created with a lockfile cannot download a version it does not list",
		"curl -sS -m 20 "+npmReg+"gate-demo/-/gate-demo-1.1.0.tgz",
		[]string{"not_in_lockfile", "sandbox.lockfiles"},
		func(r result, wmark uint64) []string {
			got := s.w.Since(wmark, world.ByRole(world.RoleNPM), world.Containing("gate-demo-1.1.0.tgz"))
			return expect(strings.Contains(r.stdout, "not_in_lockfile: npm:gate-demo@1.1.0 is not in app/package-lock.json"), "the refusal does not name the lockfile",
				len(got) == 0, "the registry served the unlisted tarball:\n"+records(got))
		})
}
