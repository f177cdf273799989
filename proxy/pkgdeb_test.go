package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/ulikunitz/xz"
)

// debWorld is a Debian mirror: a Packages index (xz, also under
// by-hash) listing gate-deb 1.0-1 and gate-deb-bad 1.0-1 with their
// SHA256, and the pool's .debs (gate-deb-bad's bytes differ from the
// index's digest).
type debWorld struct {
	mu       sync.Mutex
	served   map[string]int
	packages []byte // Packages.xz
}

const (
	debPath    = "/debian/pool/main/g/gate-deb/gate-deb_1.0-1_amd64.deb"
	debBadPath = "/debian/pool/main/g/gate-deb-bad/gate-deb-bad_1.0-1_amd64.deb"
	debPkgs    = "/debian/dists/stable/main/binary-amd64/Packages.xz"
)

func debBytes(name string) []byte { return bytes.Repeat([]byte("!<arch>\n"+name+"\n"), 400) }

func newDebWorld(t *testing.T) *debWorld {
	var idx strings.Builder
	for _, name := range []string{"gate-deb", "gate-deb-bad"} {
		sum := sha256.Sum256(debBytes(name))
		fmt.Fprintf(&idx, "Package: %s\nVersion: 1.0-1\nArchitecture: amd64\nDescription: a test package\n a second line\nFilename: pool/main/g/%s/%s_1.0-1_amd64.deb\nSize: %d\nSHA256: %s\n\n",
			name, name, name, len(debBytes(name)), hex.EncodeToString(sum[:]))
	}
	var b bytes.Buffer
	w, err := xz.NewWriter(&b)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(idx.String()))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return &debWorld{served: map[string]int{}, packages: b.Bytes()}
}

func (d *debWorld) handlers() map[string]http.Handler {
	return map[string]http.Handler{"/debian/": http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		d.served[r.URL.Path]++
		d.mu.Unlock()
		sum := sha256.Sum256(d.packages)
		switch r.URL.Path {
		case debPkgs, "/debian/dists/stable/main/binary-amd64/by-hash/SHA256/" + hex.EncodeToString(sum[:]):
			rw.Write(d.packages)
		case debPath:
			rw.Write(debBytes("gate-deb"))
		case debBadPath:
			b := debBytes("gate-deb-bad")
			rw.Write(append([]byte("tampered"), b[8:]...))
		default:
			http.NotFound(rw, r)
		}
	})}
}

func (d *debWorld) count(path string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.served[path]
}

// TestPackageGateDebian: with the package cache on, the gate reads the
// Packages index apt fetches (passed on byte for byte) and checks each
// .deb it lists against its SHA256 before the last byte; a matching .deb
// is cached and served from there next time, a tampered one is cut and
// never cached, and one whose index the appliance has not seen passes
// unchecked and uncached. Debian gives no publish time: where
// min_release_age is set, unknown_release_age decides.
func TestPackageGateDebian(t *testing.T) {
	d := newDebWorld(t)
	g := newGateEnvWith(t, gateOpts{extra: d.handlers(), cache: openTestCache(t, t.TempDir(), 64<<20)})
	const plain = "plain.example.test"

	// No index seen yet: nothing to check against.
	resp, body := g.get(t, g.regURL(plain, debPath), "")
	if pk := g.nthPackage(t, debPath, 1); resp.StatusCode != 200 || body != string(debBytes("gate-deb")) || pk.Integrity != "" || pk.Cache != "" {
		t.Fatalf("before the index: %d, integrity %q, cache %q", resp.StatusCode, pk.Integrity, pk.Cache)
	}
	resp, body = g.get(t, g.regURL(plain, debPkgs), "")
	if resp.StatusCode != 200 || body != string(d.packages) {
		t.Fatalf("Packages.xz: %d, changed in passing: %v", resp.StatusCode, body != string(d.packages))
	}
	sum := sha256.Sum256(debBytes("gate-deb"))
	for i := 2; i <= 3; i++ {
		resp, body = g.get(t, g.regURL(plain, debPath), "")
		pk := g.nthPackage(t, debPath, i)
		if want := []string{cacheMiss, cacheHit}[i-2]; resp.StatusCode != 200 || body != string(debBytes("gate-deb")) ||
			pk.Integrity != "sha256-"+base64.StdEncoding.EncodeToString(sum[:]) || pk.Cache != want {
			t.Errorf("download %d: %d, integrity %q, cache %q (want %s)", i, resp.StatusCode, pk.Integrity, pk.Cache, want)
		}
	}
	if n := d.count(debPath); n != 2 {
		t.Errorf("the mirror served the .deb %d times, want 2 (once before the index, once to fill the cache)", n)
	}
	for range 2 {
		g.cutShort(t, plain, debBadPath, "integrity_mismatch: gate-deb-bad@1.0-1")
	}
	if n := d.count(debBadPath); n != 2 {
		t.Errorf("the tampered .deb was fetched %d times, want 2 (never from the cache)", n)
	}
	// A letter escaped in the path (the mirror sees the normal form) is no
	// way around the check.
	g.cutShort(t, plain, strings.Replace(debBadPath, "/pool/", "/p%6Fol/", 1), "integrity_mismatch: gate-deb-bad@1.0-1")

	// min_release_age with no publish time: unknown_release_age decides.
	resp, body = g.get(t, g.regURL("registry.example.test", debPath), "")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "no_publish_time: the registry gives no publish time for gate-deb@1.0-1") {
		t.Errorf("age-gated category: %d %s", resp.StatusCode, body)
	}
	resp, _ = g.get(t, g.regURL("open.example.test", debPath), "")
	if e := g.hostEvent(t, "open.example.test", debPath); resp.StatusCode != 200 || !strings.Contains(e.HTTP.Package.Warning, "no_publish_time") {
		t.Errorf("fail-open category: %d, warning %q", resp.StatusCode, e.HTTP.Package.Warning)
	}
}
