package proxy

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"airlock/audit"
	"airlock/e2e/world/pkgreg"
)

// TestPackageBench measures for bench/packages.sh, on the harness of
// the cache tests; it runs only when AIRLOCK_BENCH_PACKAGES names what
// to measure:
//
//	meta  a 200-version packument: direct from the registry (built per
//	      request, and the same bytes served static), through a category
//	      without package rules, rewritten by the gate on every request,
//	      and a metadata cache hit; AIRLOCK_BENCH_N requests each (default
//	      1000), interleaved
//	npm   a second install of the 50-package tree with npm, and its floor
//	pip   the same with 50 PyPI packages and pip
//
// AIRLOCK_BENCH_LATENCY (a Go duration) delays every registry answer.
// Each result is one line "BENCH {json}" on stdout. The checks are the
// cache tests' (a second install served from the cache); the times are
// not asserted: the script sets them beside their targets.
func TestPackageBench(t *testing.T) {
	part := os.Getenv("AIRLOCK_BENCH_PACKAGES")
	if part == "" {
		t.Skip("skipping: a measurement for bench/packages.sh (set AIRLOCK_BENCH_PACKAGES)")
	}
	latency, err := time.ParseDuration(cmp.Or(os.Getenv("AIRLOCK_BENCH_LATENCY"), "0s"))
	if err != nil {
		t.Fatalf("AIRLOCK_BENCH_LATENCY: %v", err)
	}
	switch part {
	case "meta":
		n, err := strconv.Atoi(cmp.Or(os.Getenv("AIRLOCK_BENCH_N"), "1000"))
		if err != nil || n < 1 {
			t.Fatalf("AIRLOCK_BENCH_N %q is not a positive count", os.Getenv("AIRLOCK_BENCH_N"))
		}
		benchMeta(t, n)
	case "npm":
		requireTool(t, "npm", "--version")
		benchInstall(t, part, latency)
	case "pip":
		requireTool(t, "python3", "-m", "pip", "--version")
		benchInstall(t, part, latency)
	default:
		t.Fatalf("AIRLOCK_BENCH_PACKAGES %q: want meta, npm or pip", part)
	}
}

// benchResult prints one result for the script.
func benchResult(t *testing.T, v map[string]any) {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("BENCH %s\n", b)
}

// directClient reaches the registry without the proxy, as a client
// outside any appliance would.
func (g *gateEnv) directClient() *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(g.regCA)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(g.regPort)))
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	g.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// benchMeta times bigPackument's abbreviated packument on five paths,
// one request of each in turn (drift moves them alike), after ten of
// each to warm up (connections; the miss that fills the cache).
func benchMeta(t *testing.T, n int) {
	big := []pkgreg.Package{bigPackument()}
	cached := newMetaEnv(t, gateOpts{npm: big, cache: openTestCache(t, t.TempDir(), 1<<30)})
	rewrite := newMetaEnv(t, gateOpts{npm: big})
	plain := newMetaEnv(t, gateOpts{npm: big, noOSV: true})
	rows := []struct {
		name string
		c    *http.Client
		url  string
	}{
		{"direct", cached.directClient(), cached.regURL("registry.example.test", "/cache-big")},
		{"static", cached.directClient(), cached.regURL("registry.example.test", staticPath)},
		{"mitm", plain.explicitClient(), plain.regURL("plain.example.test", staticPath)},
		{"rewrite", rewrite.explicitClient(), rewrite.regURL("registry.example.test", "/cache-big")},
		{"hit", cached.explicitClient(), cached.regURL("registry.example.test", "/cache-big")},
	}
	lat := make([][]time.Duration, len(rows))
	size := make([]int64, len(rows))
	for i := -10; i < n; i++ {
		for j, r := range rows {
			d, b := timePackument(t, r.c, r.url)
			if i >= 0 {
				lat[j] = append(lat[j], d)
			}
			size[j] = b
		}
	}
	cached.requireGatedHit(t)
	for j, r := range rows {
		slices.Sort(lat[j])
		benchResult(t, map[string]any{"part": "meta", "row": r.name, "n": n, "bytes": size[j],
			"p50_us": quantileUS(lat[j], 0.50), "p99_us": quantileUS(lat[j], 0.99)})
	}
}

// staticPath serves, to every request, the bytes the registry answered
// once for cache-big's abbreviated packument: a registry that builds
// nothing per request (pkgreg builds every document anew).
const staticPath = "/static/cache-big"

// newMetaEnv is newGateEnvWith o plus staticPath.
func newMetaEnv(t *testing.T, o gateOpts) *gateEnv {
	var reg atomic.Pointer[pkgreg.Registry]
	var once sync.Once
	rec := httptest.NewRecorder()
	o.extra = map[string]http.Handler{staticPath: http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		once.Do(func() {
			req := httptest.NewRequest(http.MethodGet, "/cache-big", nil)
			req.Header.Set("Accept", "application/vnd.npm.install-v1+json")
			reg.Load().ServeHTTP(rec, req)
		})
		rw.Header().Set("Content-Type", rec.Header().Get("Content-Type"))
		rw.Write(rec.Body.Bytes())
	})}
	g := newGateEnvWith(t, o)
	reg.Store(g.reg)
	return g
}

// quantileUS is the p quantile of sorted durations, in microseconds.
func quantileUS(sorted []time.Duration, p float64) float64 {
	i := min(len(sorted)-1, int(float64(len(sorted))*p))
	return float64(sorted[i].Nanoseconds()) / 1e3
}

// benchInstall runs a first and a second install of the 50-package tree
// through the proxy with the cache, then the floor: the same install
// with no network at all (npm --offline from the first install's npm
// cache; pip --no-index from a directory of the same wheels).
func benchInstall(t *testing.T, client string, latency time.Duration) {
	pc := openTestCache(t, t.TempDir(), 1<<30)
	g := newGateEnvWith(t, gateOpts{npm: cacheTree(), py: cachePy(cacheTreeSize), cache: pc, latency: latency})
	install := func(name string) time.Duration { return g.installNPMTree(t, npmCLI, name, name+"-cache") }
	floor := func() time.Duration { return g.installNPMTree(t, npmCLI, "floor", "first-cache", "--offline") }
	if client == "pip" {
		wheels := g.writeWheels(t, cachePy(cacheTreeSize))
		install = func(name string) time.Duration { return g.installPyTree(t, name, cacheTreeSize, g.pipIndex()) }
		floor = func() time.Duration {
			return g.installPyTree(t, "floor", cacheTreeSize, []string{"--no-index", "--find-links", wheels})
		}
	}
	cpu := map[string][2]time.Duration{} // what each install cost this process (proxy, registry) and the client
	measured := func(name string, f func() time.Duration) time.Duration {
		p0, c0 := procCPU(), childCPU()
		d := f()
		cpu[name] = [2]time.Duration{procCPU() - p0, childCPU() - c0}
		return d
	}
	r := g.secondInstall(t, pc, cacheTreeSize, func(name string) time.Duration {
		return measured(name, func() time.Duration { return install(name) })
	})
	hits, start := len(g.reg.Hits()), time.Now()
	fl := measured("floor", floor)
	if n, reqs := len(g.reg.Hits())-hits, g.requestsSince(start); n != 0 || len(reqs) != 0 {
		t.Fatalf("the floor install reached the registry (%d requests) or the proxy: %v", n, reqs)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	res := map[string]any{"part": client, "latency_ms": ms(latency), "packages": cacheTreeSize,
		"first_ms": ms(r.first), "second_ms": ms(r.second), "floor_ms": ms(fl),
		"hits": r.counts[cacheHit], "artifacts": sumCounts(r.counts), "registry_requests": r.requests}
	for name, c := range cpu {
		res[name+"_proxy_cpu_ms"], res[name+"_client_cpu_ms"] = ms(c[0]), ms(c[1])
	}
	benchResult(t, res)
}

// childCPU is the user plus system CPU time of the children waited for
// (the clients).
func childCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// requestsSince lists the http requests the proxy began at or after
// start ("METHOD host path"). The close records of earlier connections,
// written when the client that held them exits, are not requests.
func (g *gateEnv) requestsSince(start time.Time) []string {
	var out []string
	for _, e := range g.ev.all() {
		if e.Kind == audit.KindHTTP && e.HTTP != nil && !e.Time.Before(start) {
			out = append(out, e.HTTP.Method+" "+e.HTTP.Host+e.HTTP.Path)
		}
	}
	return out
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// writeWheels writes the registry's wheels of pkgs into a new directory
// and returns it.
func (g *gateEnv) writeWheels(t *testing.T, pkgs []pkgreg.Package) string {
	dir := filepath.Join(g.dir, "wheels")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		for _, v := range p.Versions {
			name := pkgreg.WheelName(p.Name, v.Version)
			if err := os.WriteFile(filepath.Join(dir, name), g.reg.Artifact("/packages/"+name), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}
