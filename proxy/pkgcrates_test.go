package proxy

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// cratesWorld is a Cargo sparse registry: index files at /ab/cd/NAME
// (one JSON line per version, with cksum and, where set, pubtime) and
// downloads at /api/v1/crates/NAME/VERSION/download, on one host.
type cratesWorld struct {
	mu        sync.Mutex
	crates    map[string][]crateVersion
	downloads map[string]int // path -> times served
}

type crateVersion struct {
	vers   string
	age    time.Duration // 0: no pubtime in the index
	tamper bool          // the bytes served are not the ones the cksum names
}

func crateBytes(name, vers string) []byte {
	return []byte(strings.Repeat("crate "+name+" "+vers+"\n", 500))
}

func newCratesWorld() *cratesWorld {
	return &cratesWorld{downloads: map[string]int{}, crates: map[string][]crateVersion{
		"gate-crate":     {{vers: "0.9.0"}, {vers: "1.0.0", age: 30 * day}, {vers: "1.1.0", age: time.Hour}},
		"gate-crate-bad": {{vers: "1.0.0", age: 30 * day, tamper: true}},
	}}
}

// handlers are the world's paths, for gateOpts.extra.
func (w *cratesWorld) handlers() map[string]http.Handler {
	idx := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		name := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		vs, ok := w.crates[name]
		if !ok || r.URL.Path != sparseIndexPath(name) {
			http.NotFound(rw, r)
			return
		}
		var b strings.Builder
		for _, v := range vs {
			sum := sha256.Sum256(crateBytes(name, v.vers))
			line := map[string]any{"name": name, "vers": v.vers, "deps": []any{}, "cksum": hex.EncodeToString(sum[:]), "features": map[string]any{}, "yanked": false}
			if v.age > 0 {
				line["pubtime"] = time.Now().Add(-v.age).UTC().Format(time.RFC3339)
			}
			j, _ := json.Marshal(line)
			b.Write(j)
			b.WriteByte('\n')
		}
		rw.Write([]byte(b.String()))
	})
	dl := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/api/v1/crates/"), "/")
		if len(parts) != 3 || parts[2] != "download" {
			http.NotFound(rw, r)
			return
		}
		for _, v := range w.crates[parts[0]] {
			if v.vers == parts[1] {
				w.mu.Lock()
				w.downloads[r.URL.Path]++
				w.mu.Unlock()
				b := crateBytes(parts[0], v.vers)
				if v.tamper {
					b = append([]byte("tampered"), b[8:]...)
				}
				rw.Header().Set("Content-Type", "application/gzip")
				rw.Write(b)
				return
			}
		}
		http.NotFound(rw, r)
	})
	return map[string]http.Handler{"/ga/te/": idx, "/api/v1/crates/": dl}
}

func (w *cratesWorld) served(path string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.downloads[path]
}

// TestPackageGateCrates: the gate reads a Cargo index (sparse) like npm
// and PyPI metadata: versions younger than the release age, or without
// a pubtime where unknown_release_age denies, are dropped from the index
// and their downloads refused; a .crate is checked against the index's
// cksum before its last byte, and the shared cache stores it only then
// and serves it next time; a tampered one is cut and never cached.
func TestPackageGateCrates(t *testing.T) {
	w := newCratesWorld()
	g := newGateEnvWith(t, gateOpts{extra: w.handlers(), cache: openTestCache(t, t.TempDir(), 64<<20)})
	const host = "registry.example.test"

	resp, body := g.get(t, g.regURL(host, "/ga/te/gate-crate"), "")
	if resp.StatusCode != 200 || !strings.Contains(body, `"vers":"1.0.0"`) || strings.Contains(body, `"vers":"1.1.0"`) || strings.Contains(body, `"vers":"0.9.0"`) {
		t.Errorf("index: %d %s", resp.StatusCode, body)
	}
	gated := gatedVersions(g.hostEvent(t, host, "/ga/te/gate-crate"))
	if !strings.HasPrefix(gated["1.1.0"], "package_too_new: gate-crate@1.1.0") || !strings.HasPrefix(gated["0.9.0"], "no_publish_time") {
		t.Errorf("gated %v", gated)
	}

	resp, body = g.get(t, g.regURL(host, "/api/v1/crates/gate-crate/1.1.0/download"), "")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "package_too_new: gate-crate@1.1.0 was published ") {
		t.Errorf("too new download: %d %s", resp.StatusCode, body)
	}
	const ok = "/api/v1/crates/gate-crate/1.0.0/download"
	for i := 1; i <= 2; i++ {
		resp, body = g.get(t, g.regURL(host, ok), "")
		if resp.StatusCode != 200 || body != string(crateBytes("gate-crate", "1.0.0")) {
			t.Fatalf("download %d: %d, %d bytes", i, resp.StatusCode, len(body))
		}
		pk := g.nthPackage(t, ok, i)
		sum := sha256.Sum256(crateBytes("gate-crate", "1.0.0"))
		if want := []string{cacheMiss, cacheHit}[i-1]; pk.Cache != want || pk.Integrity != "sha256-"+base64.StdEncoding.EncodeToString(sum[:]) || pk.Published == "" {
			t.Errorf("download %d: cache %q (want %s), integrity %q, published %q", i, pk.Cache, want, pk.Integrity, pk.Published)
		}
	}
	if n := w.served(ok); n != 1 {
		t.Errorf("the registry served the crate %d times, want once (then the cache)", n)
	}

	// A tampered crate (no index fetched first: the gate reads the index
	// file itself) is cut before its last byte and never cached.
	const bad = "/api/v1/crates/gate-crate-bad/1.0.0/download"
	for range 2 {
		g.cutShort(t, host, bad, "integrity_mismatch: gate-crate-bad@1.0.0")
	}
	if n := w.served(bad); n != 2 {
		t.Errorf("the tampered crate was fetched %d times, want 2 (never served from the cache)", n)
	}

	// Where unknown_release_age = "allow", a version without a pubtime
	// passes, with a warning.
	resp, _ = g.get(t, g.regURL("open.example.test", "/api/v1/crates/gate-crate/0.9.0/download"), "")
	if e := g.hostEvent(t, "open.example.test", "/api/v1/crates/gate-crate/0.9.0/download"); resp.StatusCode != 200 || !strings.Contains(e.HTTP.Package.Warning, "no_publish_time") {
		t.Errorf("fail-open download: %d, warning %q", resp.StatusCode, e.HTTP.Package.Warning)
	}
}
