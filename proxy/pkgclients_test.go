package proxy

import (
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"airlock/e2e/world/pkgreg"
	"airlock/policies"
)

// The npm-registry clients the gate tests run for real: npm from the
// host, and pnpm and yarn (classic and berry) at the exact versions of
// sdk/clients/package-lock.json (`make sdk-deps` installs them; CI runs
// it before the tests).

// npmClient is one client: how to find it and how to point it at the
// registry through the proxy, with the appliance CA and caches of its
// own, with its own minimum-release-age setting off.
type npmClient struct {
	name string
	bin  func() (string, error)
	// setup writes the project's config files.
	setup func(g *gateEnv, proj, registry, cache string) error
	// add is the command line that adds pkgs to the project, with the
	// project's cache.
	add func(cache string, pkgs []string) []string
	// pinned is the command line that installs name@version from its
	// tarball, without asking for metadata first (a URL, or a lockfile it
	// writes): the download is what the proxy decides.
	pinned func(g *gateEnv, proj, name, version string) ([]string, error)
	// hidesPhrase: the client prints a refused download's status code
	// with the standard text, not the reason phrase the proxy sent (yarn
	// classic), so the reason is seen in the event and log only.
	hidesPhrase bool
	// ownGate turns the client's own minimum release age on (to a day,
	// shorter than the proxy's gate); yarn classic has none.
	ownGate ownGate
	// abbreviated: the client asks for the abbreviated packument
	// (Accept: application/vnd.npm.install-v1+json).
	abbreviated bool
}

// ownGate is the line of a client's config file that sets its own
// minimum release age: off as setup writes it, and on.
type ownGate struct{ file, off, on string }

// turnOn turns the client's own gate on in proj.
func (o ownGate) turnOn(proj string) error {
	p := filepath.Join(proj, o.file)
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), o.off+"\n") {
		return fmt.Errorf("%s has no line %q", p, o.off)
	}
	return os.WriteFile(p, []byte(strings.Replace(string(b), o.off+"\n", o.on+"\n", 1)), 0o644)
}

// clientsDir is where `make sdk-deps` installs pnpm and yarn.
func clientsDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(filepath.Dir(file)), "sdk", "clients", "node_modules")
}

// pinnedClient finds a client of sdk/clients by its path there.
func pinnedClient(rel string) func() (string, error) {
	return func() (string, error) {
		p := filepath.Join(clientsDir(), rel)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s is not installed (make sdk-deps installs it): %w", rel, err)
		}
		return p, nil
	}
}

var (
	npmCLI = npmClient{
		name: "npm",
		bin:  func() (string, error) { return exec.LookPath("npm") },
		setup: func(g *gateEnv, proj, registry, cache string) error {
			return writeFile(proj, ".npmrc", npmrc(g, registry, cache)+"min-release-age=0\n")
		},
		ownGate: ownGate{".npmrc", "min-release-age=0", "min-release-age=1"}, // days
		// The environment's npm_config_cache outranks the project's
		// .npmrc: the command line outranks both.
		add: func(cache string, pkgs []string) []string {
			return append([]string{"install", "--no-audit", "--no-fund", "--loglevel=warn", "--no-package-lock", "--cache", cache}, pkgs...)
		},
		pinned: func(g *gateEnv, proj, name, version string) ([]string, error) {
			return []string{"install", "--no-audit", "--no-fund", "--no-package-lock", "--cache", proj + "-cache", tarballURL(g, name, version)}, nil
		},
	}
	pnpmCLI = npmClient{
		name: "pnpm",
		bin:  pinnedClient("pnpm/bin/pnpm.cjs"),
		setup: func(g *gateEnv, proj, registry, cache string) error {
			return writeFile(proj, ".npmrc", npmrc(g, registry, cache)+"store-dir="+filepath.Join(cache, "store")+
				"\ncache-dir="+filepath.Join(cache, "meta")+"\nminimum-release-age=0\n")
		},
		ownGate: ownGate{".npmrc", "minimum-release-age=0", "minimum-release-age=1440"}, // minutes
		add: func(_ string, pkgs []string) []string {
			return append([]string{"add", "--reporter=append-only"}, pkgs...)
		},
		// pnpm resolves a tarball URL under the registry through the
		// packument: a lockfile makes it fetch the tarball directly.
		pinned: func(g *gateEnv, proj, name, version string) ([]string, error) {
			sum := sha512.Sum512(g.reg.Artifact(pkgreg.NPMTarballPath(name, version)))
			lock := fmt.Sprintf("lockfileVersion: '9.0'\n\nsettings:\n  autoInstallPeers: true\n  excludeLinksFromLockfile: false\n\n"+
				"importers:\n\n  .:\n    dependencies:\n      %[1]s:\n        specifier: %[2]s\n        version: %[2]s\n\n"+
				"packages:\n\n  %[1]s@%[2]s:\n    resolution: {integrity: sha512-%[3]s}\n\nsnapshots:\n\n  %[1]s@%[2]s: {}\n",
				name, version, base64.StdEncoding.EncodeToString(sum[:]))
			pj := fmt.Sprintf(`{"name": "proj", "version": "1.0.0", "private": true, "dependencies": {%q: %q}}`, name, version)
			if err := writeFile(proj, "package.json", pj); err != nil {
				return nil, err
			}
			return []string{"install", "--frozen-lockfile", "--reporter=append-only"}, writeFile(proj, "pnpm-lock.yaml", lock)
		},
		abbreviated: true,
	}
	yarnClassicCLI = npmClient{
		name: "yarn-classic",
		bin:  pinnedClient("yarn/bin/yarn.js"),
		setup: func(g *gateEnv, proj, registry, cache string) error {
			proxy := "http://" + g.explicit
			return writeFile(proj, ".yarnrc", fmt.Sprintf("registry %q\nproxy %q\nhttps-proxy %q\ncafile %q\ncache-folder %q\n",
				registry, proxy, proxy, filepath.Join(g.dir, "ca.pem"), cache))
		},
		add: func(_ string, pkgs []string) []string {
			return append([]string{"add", "--non-interactive", "--no-lockfile", "--no-progress"}, pkgs...)
		},
		pinned: func(g *gateEnv, proj, name, version string) ([]string, error) {
			return []string{"add", "--non-interactive", "--no-lockfile", tarballURL(g, name, version)}, nil
		},
		hidesPhrase: true,
		abbreviated: true,
	}
	yarnBerryCLI = npmClient{
		name: "yarn-berry",
		bin:  pinnedClient("@yarnpkg/cli-dist/bin/yarn.js"),
		setup: func(g *gateEnv, proj, registry, cache string) error {
			proxy := "http://" + g.explicit
			if err := writeFile(proj, "yarn.lock", ""); err != nil {
				return err
			}
			return writeFile(proj, ".yarnrc.yml", fmt.Sprintf("npmRegistryServer: %q\nhttpProxy: %q\nhttpsProxy: %q\nhttpsCaFilePath: %q\n"+
				"enableGlobalCache: false\ncacheFolder: %q\nglobalFolder: %q\nnodeLinker: node-modules\nenableTelemetry: false\n"+
				"enableImmutableInstalls: false\nnpmMinimalAgeGate: 0\n",
				registry, proxy, proxy, filepath.Join(g.dir, "ca.pem"), filepath.Join(cache, "archives"), filepath.Join(cache, "global")))
		},
		ownGate: ownGate{".yarnrc.yml", "npmMinimalAgeGate: 0", "npmMinimalAgeGate: 1440"}, // minutes
		add:     func(_ string, pkgs []string) []string { return append([]string{"add"}, pkgs...) },
		pinned: func(g *gateEnv, proj, name, version string) ([]string, error) {
			return []string{"add", name + "@" + tarballURL(g, name, version)}, nil
		},
	}
	// npmClients are every client the gate's install tests run.
	npmClients = []npmClient{npmCLI, pnpmCLI, yarnClassicCLI, yarnBerryCLI}
)

func tarballURL(g *gateEnv, name, version string) string {
	return g.regURL("registry.example.test", pkgreg.NPMTarballPath(name, version))
}

// npmrc is the .npmrc part every npm-style client reads.
func npmrc(g *gateEnv, registry, cache string) string {
	proxy := "http://" + g.explicit
	return fmt.Sprintf("registry=%s\nproxy=%s\nhttps-proxy=%s\ncafile=%s\ncache=%s\nupdate-notifier=false\n",
		registry, proxy, proxy, filepath.Join(g.dir, "ca.pem"), cache)
}

func writeFile(dir, name, body string) error {
	return os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
}

// requireClient is the client's executable. A missing one fails the
// test in CI (.ci/run installs every client and sets
// AIRLOCK_REQUIRE_CLIENTS) and skips it, saying why, elsewhere.
func requireClient(t *testing.T, c npmClient) string {
	t.Helper()
	bin, err := c.bin()
	if err == nil {
		var out []byte
		if out, err = exec.Command(bin, "--version").CombinedOutput(); err != nil {
			err = fmt.Errorf("%s --version: %v: %s", bin, err, out)
		}
	}
	if err != nil {
		if os.Getenv("AIRLOCK_REQUIRE_CLIENTS") != "" || os.Getenv("CI") != "" {
			t.Fatalf("%s: %v", c.name, err)
		}
		t.Skipf("skipping: %s: %v", c.name, err)
	}
	return bin
}

// clientProject makes a project named name for c, with the registry at
// host and caches of its own (so the client's own cache serves
// nothing), and returns it and c's executable.
func (g *gateEnv) clientProject(t *testing.T, c npmClient, host, name string) (proj, bin string) {
	t.Helper()
	bin = requireClient(t, c)
	proj = filepath.Join(g.dir, name)
	if err := os.MkdirAll(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(proj, "package.json", `{"name": "proj", "version": "1.0.0", "private": true}`+"\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.setup(g, proj, g.regURL(host, "/"), filepath.Join(g.dir, name+"-cache")); err != nil {
		t.Fatal(err)
	}
	return proj, bin
}

// clientInstall adds pkgs with c into a new project named name, from
// the registry at host; it fails the test if the install fails.
func (g *gateEnv) clientInstall(t *testing.T, c npmClient, host, name string, pkgs ...string) string {
	t.Helper()
	proj, bin := g.clientProject(t, c, host, name)
	if out, err := g.run(t, proj, bin, c.add(proj+"-cache", pkgs)...); err != nil {
		t.Fatalf("%s add %v (%s): %v\n%s\nevents:\n%s", c.name, pkgs, name, err, out, g.ev.dump())
	}
	return proj
}

// acceptLog records the Accept header of every request the policy
// decides, by path.
type acceptLog struct {
	mu  sync.Mutex
	log map[string][]string
}

// wrap is d, recording into a.
func (a *acceptLog) wrap(d Decider) Decider { return acceptRecorder{d, a} }

func (a *acceptLog) accepts(path string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.log[path]...)
}

type acceptRecorder struct {
	Decider
	a *acceptLog
}

func (r acceptRecorder) Decide(pr policies.Request) policies.Verdict {
	r.a.mu.Lock()
	if r.a.log == nil {
		r.a.log = map[string][]string{}
	}
	r.a.log[pr.Path] = append(r.a.log[pr.Path], pr.Accept)
	r.a.mu.Unlock()
	return r.Decider.Decide(pr)
}

// TestPackageGateClients: every client installs the newest mature
// version, never one younger than the gate, none with an install script
// the category denies, none an advisory marks — with the client's own
// minimum-release-age setting off (under a shorter gate the same client
// takes the too-new version; with its own setting on, the client reads
// the publish times of the packument the proxy gives). Clients that ask for the abbreviated
// packument get one rewritten from the full one. A version the gate
// denies, pinned by its tarball, fails the install, and the client says
// why.
func TestPackageGateClients(t *testing.T) {
	for _, c := range npmClients {
		t.Run(c.name, func(t *testing.T) {
			requireClient(t, c)
			al := &acceptLog{}
			var lenient atomic.Pointer[policies.Bound]
			g := newGateEnvWith(t, gateOpts{policy: func(base Decider) Decider {
				if l := lenient.Load(); l != nil {
					return al.wrap(l)
				}
				return al.wrap(base)
			}})
			proj := g.clientInstall(t, c, "registry.example.test", "proj", "gate-demo", "gate-scripts", "gate-mal", "@scope/gate-scoped")
			for pkg, want := range map[string]string{"gate-demo": "1.1.0", "gate-scripts": "1.0.0", "gate-mal": "1.0.0", "@scope/gate-scoped": "1.0.0"} {
				if got := installedVersion(t, filepath.Join(proj, "node_modules", pkg, "package.json")); got != want {
					t.Errorf("%s installed %s@%s, want %s", c.name, pkg, got, want)
				}
			}
			if _, err := os.Stat(filepath.Join(proj, "node_modules", "gate-scripts", "SCRIPT-RAN")); err == nil {
				t.Error("a hidden version's install script ran")
			}
			for _, h := range g.reg.Hits() {
				if h.Path == "/gate-demo" && h.Accept != "application/json" {
					t.Errorf("the registry was asked for %s with Accept %q, not for the full packument", h.Path, h.Accept)
				}
			}
			accepts := al.accepts("/gate-demo")
			if abbr := slices.ContainsFunc(accepts, func(a string) bool { return strings.Contains(a, "application/vnd.npm.install-v1+json") }); abbr != c.abbreviated {
				t.Errorf("%s asked for /gate-demo with Accept %q: abbreviated %v, want %v", c.name, accepts, abbr, c.abbreviated)
			}

			// A version the gate denies, pinned by its tarball: the
			// install fails, saying why.
			for _, d := range []struct{ name, version, reason string }{
				{"gate-demo", "2.0.0", "package_too_new: gate-demo@2.0.0 was published "},
				{"gate-scripts", "1.1.0", "install_script: gate-scripts@1.1.0"},
				{"gate-mal", "1.0.1", "osv:MAL-2026-0001: "},
			} {
				g.pinnedRefused(t, c, d.name, d.version, d.reason)
			}

			// The control: under a policy whose gate is 30 minutes, the
			// same client takes the hour-old version.
			lenient.Store(g.policyWith(t, `min_release_age = "72h"`, `min_release_age = "30m"`))
			proj = g.clientInstall(t, c, "registry.example.test", "lenient", "gate-demo")
			if got := installedVersion(t, filepath.Join(proj, "node_modules", "gate-demo", "package.json")); got != "2.0.0" {
				t.Errorf("under a 30-minute gate %s installed gate-demo@%s, want 2.0.0", c.name, got)
			}
			// With the client's own gate on (a day), it keeps the
			// hour-old version out by itself: the packument the proxy gives
			// has the publish times it reads.
			if c.ownGate.file != "" {
				proj, bin := g.clientProject(t, c, "registry.example.test", "own-gate")
				if err := c.ownGate.turnOn(proj); err != nil {
					t.Fatal(err)
				}
				if out, err := g.run(t, proj, bin, c.add(proj+"-cache", []string{"gate-demo"})...); err != nil {
					t.Fatalf("%s with its own gate on: %v\n%s", c.name, err, out)
				}
				if got := installedVersion(t, filepath.Join(proj, "node_modules", "gate-demo", "package.json")); got != "1.1.0" {
					t.Errorf("%s with its own gate on installed gate-demo@%s, want 1.1.0 (its own gate is a day)", c.name, got)
				}
			}
		})
	}
}

// pinnedRefused installs name@version, which the gate denies, with c
// from its tarball: the install fails, the client's output gives the
// reason (or, for a client that hides it, the 403), and the event says
// why.
func (g *gateEnv) pinnedRefused(t *testing.T, c npmClient, name, version, reason string) {
	t.Helper()
	proj, bin := g.clientProject(t, c, "registry.example.test", "pinned-"+name)
	args, err := c.pinned(g, proj, name, version)
	if err != nil {
		t.Fatal(err)
	}
	out, err := g.run(t, proj, bin, args...)
	if err == nil {
		t.Fatalf("%s installed %s@%s from its tarball:\n%s", c.name, name, version, out)
	}
	want := "airlock: " + reason
	if c.hidesPhrase {
		want = "403 Forbidden"
	}
	if !strings.Contains(out, want) {
		t.Errorf("%s's output does not say %q:\n%s", c.name, want, out)
	}
	if e := g.httpEvent(t, pkgreg.NPMTarballPath(name, version)); e.Verdict != "deny" || !strings.HasPrefix(e.Reason, reason) {
		t.Errorf("%s@%s tarball event %s %q, want a denial %q…", name, version, e.Verdict, e.Reason, reason)
	}
	if _, err := os.Stat(filepath.Join(proj, "node_modules", name, "package.json")); err == nil {
		t.Errorf("%s left %s installed after the refusal", c.name, name)
	}
}

// policyWith is the gate's policy with the first old replaced by new.
func (g *gateEnv) policyWith(t *testing.T, old, new string) *policies.Bound {
	t.Helper()
	src := strings.ReplaceAll(strings.Replace(gatePolicy, old, new, 1), "REGPORT", fmt.Sprint(g.regPort))
	parsed, err := policies.Parse("gate.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return policies.Bind(parsed, worldOperator)
}

// TestPackageGateLockfilesNPMClients: pnpm and yarn install what the
// category's lockfiles list, not the newest mature version (npm:
// TestPackageGateLockfilesClients).
func TestPackageGateLockfilesNPMClients(t *testing.T) {
	for _, c := range npmClients[1:] {
		t.Run(c.name, func(t *testing.T) {
			requireClient(t, c)
			g := newGateEnv(t)
			g.withLockfiles(t)
			proj := g.clientInstall(t, c, "locked.example.test", "proj", "gate-demo")
			if got := installedVersion(t, filepath.Join(proj, "node_modules", "gate-demo", "package.json")); got != "1.0.0" {
				t.Errorf("%s installed gate-demo@%s, want the locked 1.0.0", c.name, got)
			}
		})
	}
}
