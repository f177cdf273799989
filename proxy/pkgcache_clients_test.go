package proxy

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"airlock/audit"
	"airlock/e2e/world/pkgreg"
	"airlock/policies"
)

// The shared verified cache through the real proxy, with real npm and
// pip: a second install of the same tree is served from the cache and
// the registry sees no second download; an entry altered on disk is
// found and fetched again; a policy that denies a cached package still
// denies it; the cache survives a restart.

const cacheTreeSize = 50

// cachePySize is how many PyPI packages the tests install.
const cachePySize = 20

// cacheTree is an npm tree of 50 packages: a root that depends on 49.
func cacheTree() []pkgreg.Package {
	deps := map[string]string{}
	var out []pkgreg.Package
	for i := 1; i < cacheTreeSize; i++ {
		n := fmt.Sprintf("cache-dep-%02d", i)
		deps[n] = "^1.0.0"
		out = append(out, pkgreg.Package{Name: n, Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * day}}})
	}
	return append(out, pkgreg.Package{Name: "cache-root", Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * day, Deps: deps}}})
}

// cachePy is n PyPI packages.
func cachePy(n int) []pkgreg.Package {
	var out []pkgreg.Package
	for i := range n {
		out = append(out, pkgreg.Package{Name: fmt.Sprintf("cache-py-%02d", i), Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * day}}})
	}
	return out
}

func openTestCache(t *testing.T, dir string, max int64) *PackageCache {
	t.Helper()
	pc, err := OpenPackageCache(dir, max, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc
}

func newCacheEnv(t *testing.T, dir string) (*gateEnv, *PackageCache) {
	return newCacheEnvLatency(t, dir, 0)
}

func newCacheEnvLatency(t *testing.T, dir string, latency time.Duration) (*gateEnv, *PackageCache) {
	pc := openTestCache(t, dir, 1<<30)
	return newGateEnvWith(t, gateOpts{npm: cacheTree(), py: cachePy(cachePySize), cache: pc, latency: latency}), pc
}

// npmInstall installs the tree with npm into a new project with its own
// npm cache (so npm's own cache serves nothing) and returns how long it
// took.
func (g *gateEnv) npmInstall(t *testing.T, name string, pkgs ...string) time.Duration {
	t.Helper()
	return g.timedInstall(t, npmCLI, name, pkgs...)
}

// depPackageJSON is the package.json of an installed dependency of
// proj: hoisted (npm, yarn), or in pnpm's store layout.
func depPackageJSON(proj, dep string) string {
	if m, _ := filepath.Glob(filepath.Join(proj, "node_modules", ".pnpm", dep+"@*", "node_modules", dep, "package.json")); len(m) == 1 {
		return m[0]
	}
	return filepath.Join(proj, "node_modules", dep, "package.json")
}

// timedInstall is clientInstall from the gated registry, timed.
func (g *gateEnv) timedInstall(t *testing.T, c npmClient, name string, pkgs ...string) time.Duration {
	t.Helper()
	start := time.Now()
	g.clientInstall(t, c, "registry.example.test", name, pkgs...)
	return time.Since(start)
}

// pipIndex are pip's flags to install from the registry through the proxy.
func (g *gateEnv) pipIndex() []string {
	return []string{"--index-url", g.regURL("registry.example.test", "/simple/"),
		"--proxy", "http://" + g.explicit, "--cert", filepath.Join(g.dir, "ca.pem")}
}

// installPyTree installs the n packages of cachePy(n) into g.dir/name
// with no pip cache, from the source flags from (pipIndex, or
// --no-index --find-links DIR), checks they are there and returns how
// long pip took.
func (g *gateEnv) installPyTree(t *testing.T, name string, n int, from []string) time.Duration {
	t.Helper()
	args := append([]string{"-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir", "--no-deps",
		"--target", filepath.Join(g.dir, name)}, from...)
	for _, p := range cachePy(n) {
		args = append(args, p.Name)
	}
	start := time.Now()
	out, err := g.run(t, g.dir, "python3", args...)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("pip install (%s): %v\n%s\nevents:\n%s", name, err, out, g.ev.dump())
	}
	if m, _ := filepath.Glob(filepath.Join(g.dir, name, "cache_py_*-1.0.0.dist-info")); len(m) != n {
		t.Fatalf("pip install (%s) has %d packages, want %d", name, len(m), n)
	}
	return took
}

// installNPMTree installs cache-root (the tree of cacheTree) with c into
// project name, the client's cache in g.dir/cache (flags: more flags
// before the package, such as npm's --offline), checks every package is
// there and returns how long the client took.
func (g *gateEnv) installNPMTree(t *testing.T, c npmClient, name, cache string, flags ...string) time.Duration {
	t.Helper()
	proj, bin := g.clientProject(t, c, "registry.example.test", name)
	start := time.Now()
	out, err := g.run(t, proj, bin, c.add(filepath.Join(g.dir, cache), append(flags, "cache-root"))...)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("%s install (%s): %v\n%s\nevents:\n%s", c.name, name, err, out, g.ev.dump())
	}
	for _, p := range cacheTree() {
		if got := installedVersion(t, depPackageJSON(proj, p.Name)); got != "1.0.0" {
			t.Fatalf("%s install (%s): %s is %q", c.name, name, p.Name, got)
		}
	}
	return took
}

// cacheRun is a first and a second install of the same packages.
type cacheRun struct {
	first, second time.Duration
	counts        map[string]int // the second install's artifact events by cache value
	requests      int            // registry requests during the second install
}

// secondInstall runs install into "first" and "second" and checks that
// the first filled the cache with want artifacts and that the second was
// served from it: no download reached the registry, >= 90 % hits.
func (g *gateEnv) secondInstall(t *testing.T, pc *PackageCache, want int, install func(name string) time.Duration) cacheRun {
	t.Helper()
	r := cacheRun{first: install("first")}
	if st := pc.Stats(); st.Entries != want {
		t.Fatalf("after the first install the cache holds %d artifacts, want %d: %+v", st.Entries, want, st)
	}
	hits, evs := len(g.reg.Hits()), len(g.ev.all())
	r.second = install("second")
	if n := g.artifactDownloads(hits); n != 0 {
		t.Errorf("the registry saw %d artifact downloads on the second install", n)
	}
	r.counts, r.requests = g.cacheCounts(evs), len(g.reg.Hits())-hits
	if r.counts[cacheHit]*10 < want*9 || r.counts[cacheMiss] != 0 {
		t.Errorf("second install cache results %v, want >= 90%% of %d hits", r.counts, want)
	}
	t.Logf("mean request time: first install %v, second %v", g.meanDuration(0, evs), g.meanDuration(evs, len(g.ev.all())))
	return r
}

func (r cacheRun) String() string {
	return fmt.Sprintf("first install %v, second %v (%.2fx); registry requests on the second: %d",
		r.first.Round(time.Millisecond), r.second.Round(time.Millisecond), float64(r.second)/float64(r.first), r.requests)
}

// artifactHits counts the registry's artifact downloads from index from on.
func (g *gateEnv) artifactDownloads(from int) int {
	n := 0
	for _, h := range g.reg.Hits()[from:] {
		if strings.Contains(h.Path, "/-/") || strings.HasPrefix(h.Path, "/packages/") {
			n++
		}
	}
	return n
}

// cacheCounts counts the artifact events (a version named) by cache
// value, from event index from on.
func (g *gateEnv) cacheCounts(from int) map[string]int {
	out := map[string]int{}
	evs := g.ev.all()
	for _, e := range evs[min(from, len(evs)):] {
		if e.HTTP == nil || e.HTTP.Package == nil || e.HTTP.Package.Version == "" || e.HTTP.Status != 200 {
			continue
		}
		out[e.HTTP.Package.Cache]++
	}
	return out
}

func TestPackageCacheNPMClient(t *testing.T) {
	t.Run("loopback", func(t *testing.T) { testCacheNPM(t, npmCLI, 0) })
	// A registry 50 ms away, as a distant one is: the time a cache saves.
	t.Run("distant", func(t *testing.T) { testCacheNPM(t, npmCLI, 50*time.Millisecond) })
}

// TestPackageCacheNPMClients: pnpm's and yarn's second installs of the
// tree come from the cache too.
func TestPackageCacheNPMClients(t *testing.T) {
	for _, c := range npmClients[1:] {
		t.Run(c.name, func(t *testing.T) { testCacheNPM(t, c, 0) })
	}
}

func testCacheNPM(t *testing.T, cl npmClient, latency time.Duration) {
	requireClient(t, cl)
	g, pc := newCacheEnvLatency(t, t.TempDir(), latency)
	r := g.secondInstall(t, pc, cacheTreeSize, func(name string) time.Duration {
		return g.installNPMTree(t, cl, name, name+"-cache")
	})
	t.Logf("%s, registry latency %v, %d packages: %v", cl.name, latency, cacheTreeSize, r)
}

func TestPackageCachePipClient(t *testing.T) {
	t.Run("loopback", func(t *testing.T) { testCachePip(t, 0) })
	t.Run("distant", func(t *testing.T) { testCachePip(t, 50*time.Millisecond) })
}

func testCachePip(t *testing.T, latency time.Duration) {
	requireTool(t, "python3", "-m", "pip", "--version")
	g, pc := newCacheEnvLatency(t, t.TempDir(), latency)
	r := g.secondInstall(t, pc, cachePySize, func(name string) time.Duration {
		return g.installPyTree(t, name, cachePySize, g.pipIndex())
	})
	t.Logf("pip, registry latency %v, %d packages: %v", latency, cachePySize, r)
}

// TestPackageCacheTamperedEntry: an entry changed on disk is not served:
// it is dropped and the artifact fetched (and verified) again.
func TestPackageCacheTamperedEntry(t *testing.T) {
	requireTool(t, "npm", "--version")
	dir := t.TempDir()
	g, pc := newCacheEnv(t, dir)
	g.npmInstall(t, "first", "cache-dep-03")
	l := pc.List()
	if len(l) != 1 {
		t.Fatalf("cache holds %v", l)
	}
	blob := filepath.Join(dir, "blobs", l[0].Key[:2], l[0].Key)
	b, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	os.WriteFile(blob, b, 0o600)
	hits := len(g.reg.Hits())
	g.npmInstall(t, "second", "cache-dep-03")
	if n := g.artifactDownloads(hits); n != 1 {
		t.Errorf("after tampering the registry saw %d downloads, want 1 (the refetch)", n)
	}
	if st := pc.Stats(); st.Corrupt != 1 || st.Entries != 1 {
		t.Errorf("stats %+v, want one corrupt entry dropped and the refetched one stored", st)
	}
	if got, _ := os.ReadFile(blob); string(got) != string(g.reg.Artifact(pkgreg.NPMTarballPath("cache-dep-03", "1.0.0"))) {
		t.Error("the refetched entry is not the registry's artifact")
	}
}

// TestPackageCachePolicyStillDenies: a cached version that the
// sandbox's (new) policy denies is refused, never served from the cache.
func TestPackageCachePolicyStillDenies(t *testing.T) {
	pc := openTestCache(t, t.TempDir(), 1<<30)
	strict := false
	var strictPol Decider
	g := newGateEnvWith(t, gateOpts{cache: pc, policy: func(base Decider) Decider {
		if strict {
			return strictPol
		}
		return base
	}})
	parsed, err := policies.Parse("strict.toml", []byte(strings.ReplaceAll(strings.Replace(gatePolicy, `min_release_age = "72h"`, `min_release_age = "300d"`, 1), "REGPORT", fmt.Sprint(g.regPort))))
	if err != nil {
		t.Fatal(err)
	}
	strictPol = policies.Bind(parsed, worldOperator)
	url := g.regURL("registry.example.test", pkgreg.NPMTarballPath("gate-demo", "1.1.0"))
	if resp, _ := g.get(t, url, ""); resp.StatusCode != 200 {
		t.Fatalf("first download: %d", resp.StatusCode)
	}
	if resp, _ := g.get(t, url, ""); resp.StatusCode != 200 || g.nthPackage(t, pkgreg.NPMTarballPath("gate-demo", "1.1.0"), 2).Cache != cacheHit {
		t.Fatalf("second download: %d, not a hit; events:\n%s", resp.StatusCode, g.ev.dump())
	}
	strict = true
	resp, body := g.get(t, url, "")
	if resp.StatusCode != 403 || !strings.Contains(body, policies.CodeTooNew) {
		t.Fatalf("under the strict policy the cached version got %d %q", resp.StatusCode, body)
	}
	if st := pc.Stats(); st.Hits != 1 {
		t.Errorf("cache hits %d, want 1 (the refused request never reached the cache)", st.Hits)
	}
}

// TestPackageCachePrivateScope: an artifact fetched with credentials is
// cached for its tenant only.
func TestPackageCachePrivateScope(t *testing.T) {
	pc := openTestCache(t, t.TempDir(), 1<<30)
	tenant := "alice"
	g := newGateEnvWith(t, gateOpts{cache: pc, tenant: func() string { return tenant }})
	path := pkgreg.NPMTarballPath("gate-demo", "1.0.0")
	n := 0
	get := func() *audit.Package {
		req, _ := http.NewRequest(http.MethodGet, g.regURL("registry.example.test", path), nil)
		req.Header.Set("Authorization", "Bearer private-token")
		resp, err := g.explicitClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("download: %d", resp.StatusCode)
		}
		n++
		return g.nthPackage(t, path, n)
	}
	if pk := get(); pk.Cache != cacheMiss {
		t.Fatalf("first download cache %q", pk.Cache)
	}
	if pk := get(); pk.Cache != cacheHit {
		t.Fatalf("alice's second download cache %q", pk.Cache)
	}
	tenant = "bob"
	if pk := get(); pk.Cache != cacheMiss {
		t.Fatalf("bob got alice's private artifact from the cache (%q)", pk.Cache)
	}
	for _, m := range pc.List() {
		if m.Scope == "" {
			t.Errorf("a private artifact was stored shared: %+v", m)
		}
	}
	if n, _, err := pc.Purge(func(m CacheEntry) bool { return m.Name == "gate-demo" }); n != 2 || err != nil || pc.Stats().Entries != 0 {
		t.Errorf("purge of gate-demo: %d, %v; left %d", n, err, pc.Stats().Entries)
	}
}

// TestPackageCacheRestart: a new appliance on the same cache directory
// serves the tree from the cache; the new registry sees no download.
func TestPackageCacheRestart(t *testing.T) {
	requireTool(t, "npm", "--version")
	dir := t.TempDir()
	g, pc := newCacheEnv(t, dir)
	g.npmInstall(t, "first", "cache-root")
	pc.Close()
	g.p.Close()
	g2, pc2 := newCacheEnv(t, dir)
	if st := pc2.Stats(); st.Entries != cacheTreeSize || st.Corrupt != 0 {
		t.Fatalf("after the restart %+v", st)
	}
	g2.npmInstall(t, "second", "cache-root")
	if n := g2.artifactDownloads(0); n != 0 {
		t.Errorf("after the restart the registry saw %d downloads", n)
	}
}

// nthPackage is the package of the nth finished http event for path.
func (g *gateEnv) nthPackage(t *testing.T, path string, n int) *audit.Package {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		// A request's event is written when it ends, so a quick hit can be
		// written before the slower miss that came first: count them in
		// the order the requests began.
		var match []audit.Event
		for _, e := range g.ev.all() {
			if e.Kind == audit.KindHTTP && e.HTTP != nil && e.HTTP.Path == path && e.HTTP.Status != 0 {
				match = append(match, e)
			}
		}
		if len(match) >= n {
			slices.SortStableFunc(match, func(a, b audit.Event) int { return a.Time.Compare(b.Time) })
			return match[n-1].HTTP.Package
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no http event %d for %s; events:\n%s", n, path, g.ev.dump())
	return nil
}

// bigPackument is an npm package of 200 versions.
func bigPackument() pkgreg.Package {
	p := pkgreg.Package{Name: "cache-big"}
	for i := range 200 {
		p.Versions = append(p.Versions, pkgreg.Version{Version: fmt.Sprintf("1.%d.0", i), Age: time.Duration(400-i) * day})
	}
	p.Versions[199].Age = time.Hour // one the gate hides
	return p
}

// metaLatencies fetches the packument n times through the proxy and
// returns the sorted latencies.
func (g *gateEnv) metaLatencies(t *testing.T, n int) []time.Duration {
	t.Helper()
	url := g.regURL("registry.example.test", "/cache-big")
	c := g.explicitClient()
	out := make([]time.Duration, 0, n)
	for range n {
		d, _ := timePackument(t, c, url)
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// timePackument fetches an abbreviated packument with c and returns how
// long the whole response took and its size.
func timePackument(t *testing.T, c *http.Client, url string) (time.Duration, int64) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/vnd.npm.install-v1+json")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("packument %s: %d", url, resp.StatusCode)
	}
	return time.Since(start), n
}

// TestPackageCacheMetadataLatency: a packument of 200 versions served
// from the metadata cache, against the gate rewriting it on every
// request; the hit's whole round trip through the proxy (MITM included)
// bounds the latency the gate adds on a hit.
func TestPackageCacheMetadataLatency(t *testing.T) {
	big := []pkgreg.Package{bigPackument()}
	cached := newGateEnvWith(t, gateOpts{npm: big, cache: openTestCache(t, t.TempDir(), 1<<30)})
	plain := newGateEnvWith(t, gateOpts{npm: big})
	cached.metaLatencies(t, 1) // the miss that fills the cache
	plain.metaLatencies(t, 1)
	hit, rewrite := cached.metaLatencies(t, 200), plain.metaLatencies(t, 200)
	cached.requireGatedHit(t)
	t.Logf("200-version packument through the proxy: p50 %v (p90 %v) on a cache hit; %v (p90 %v) rewritten by the gate on every request",
		hit[100], hit[180], rewrite[100], rewrite[180])
	if hit[100] >= rewrite[100] {
		t.Errorf("a cache hit (p50 %v) is not faster than a rewrite (p50 %v)", hit[100], rewrite[100])
	}
}

// requireGatedHit fails t unless the last event was a packument served
// from the metadata cache with bigPackument's one gated version.
func (g *gateEnv) requireGatedHit(t *testing.T) {
	t.Helper()
	evs := g.ev.all()
	if last := evs[len(evs)-1]; last.HTTP == nil || last.HTTP.Package == nil || last.HTTP.Package.Cache != cacheHit || last.HTTP.Package.GatedTotal != 1 {
		t.Fatalf("last packument event is not a hit with the gated version: %+v", last.HTTP)
	}
}

// meanDuration is the mean duration of the http events [from, to).
func (g *gateEnv) meanDuration(from, to int) time.Duration {
	var sum int64
	n := 0
	for _, e := range g.ev.all()[from:to] {
		if e.HTTP != nil && e.HTTP.Status != 0 {
			sum += e.HTTP.DurationMS
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return time.Duration(sum/int64(n)) * time.Millisecond
}

// TestPackageCacheOnlyPassesUnreadable: in a category with no gate rule
// the cache alone watches metadata; a document it cannot read passes as
// it came (it is not refused, as the gate refuses what it must read),
// and is not cached.
func TestPackageCacheOnlyPassesUnreadable(t *testing.T) {
	pc := openTestCache(t, t.TempDir(), 1<<30)
	g := newGateEnvWith(t, gateOpts{cache: pc, noOSV: true})
	resp, body := g.get(t, g.regURL("plain.example.test", "/gate-corrupt"), "")
	if resp.StatusCode != 200 || !strings.HasPrefix(body, `{"name":"gate-corrupt"`) {
		t.Fatalf("unreadable packument in a category without rules: %d %q", resp.StatusCode, body)
	}
	if resp, _ := g.get(t, g.regURL("plain.example.test", "/gate-demo"), ""); resp.StatusCode != 200 {
		t.Fatalf("packument: %d", resp.StatusCode)
	}
	// Its downloads are checked and cached all the same.
	path := pkgreg.NPMTarballPath("gate-demo", "2.0.0")
	g.get(t, g.regURL("plain.example.test", path), "")
	if pk := g.nthPackage(t, path, 1); pk.Cache != cacheMiss || pk.Integrity == "" || pc.Stats().Entries != 1 {
		t.Fatalf("download in a category without rules: %+v, %d entries", pk, pc.Stats().Entries)
	}
	if st := pc.Stats(); st.MetaEntries != 1 {
		t.Errorf("metadata entries %d, want 1 (the unreadable one is not kept)", st.MetaEntries)
	}
}
