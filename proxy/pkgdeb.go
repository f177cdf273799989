package proxy

import (
	"bytes"
	"io"
	"net/http"
	"path"
	"strings"
	"sync"

	"airlock/policies"
	"airlock/proxy/internal/pkgmeta"
)

// Debian: a .deb's digest is the SHA256 its Packages index gives for
// its Filename. With the package cache on, the gate reads each Packages
// index a sandbox fetches through a registries category (passing it on
// unchanged: apt checks it against the signed Release, so it cannot be
// rewritten) and remembers those digests; a later download of a listed
// .deb is checked against its digest before its last byte and cached
// only then. A .deb whose index the appliance has not seen (apt's lists
// came with the image) passes unchecked and uncached, as apt checks it
// itself. Debian indices give no publish time: in a category with
// min_release_age, unknown_release_age decides every .deb.

const (
	maxDebIndex   = 64 << 20  // a Packages index read, compressed
	maxDebIndexUn = 512 << 20 // and uncompressed
	maxDebDigests = 1 << 20   // .deb digests remembered; when full, it starts over
)

// debDigests are the digests Packages indices gave, by category and
// Filename (pool/…).
type debDigests struct {
	mu sync.Mutex
	m  map[string]string
}

func (d *debDigests) put(cat string, files []pkgmeta.DebianFile) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil || len(d.m)+len(files) > maxDebDigests {
		d.m = make(map[string]string, len(files))
	}
	for _, f := range files {
		d.m[cat+"|"+strings.TrimPrefix(f.Filename, "./")] = f.Integrity
	}
}

func (d *debDigests) get(cat, filename string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m[cat+"|"+filename]
}

// debIndexFor says whether the request may fetch a Packages index whose
// digests the gate should remember: a GET under /dists/ through a
// registries category, with the package cache on.
func (p *Proxy) debIndexFor(x *exch, req *http.Request) bool {
	cat := x.v.Cat
	if p.cfg.PackageCache == nil || cat == nil || cat.Kind != policies.KindRegistries || req.Method != http.MethodGet || x.pkg.Ecosystem != "" {
		return false
	}
	pth := x.ev.e.HTTP.Path
	if !strings.Contains(pth, "/dists/") {
		return false
	}
	base := path.Base(pth)
	return strings.HasPrefix(base, "Packages") || strings.Contains(pth, "/by-hash/SHA256/")
}

// debIndexResponse passes a Packages index on as it comes and, once it
// ended, remembers the digests it lists.
func (p *Proxy) debIndexResponse(x *exch, resp *http.Response) *http.Response {
	if resp.StatusCode != http.StatusOK || resp.Body == nil {
		return resp
	}
	if enc := strings.TrimSpace(resp.Header.Get("Content-Encoding")); enc != "" && !strings.EqualFold(enc, "identity") {
		return resp // asked for identity; what else came is not read
	}
	cat := x.v.Cat.Name
	resp.Body = &teeIndex{rc: resp.Body, done: func(b []byte) {
		var files []pkgmeta.DebianFile
		err := pkgmeta.DebianPackages(b, maxDebIndexUn, func(f pkgmeta.DebianFile) { files = append(files, f) })
		if err != nil {
			p.log.Debug("proxy: package gate: not a Packages index", "id", x.ev.e.ID, "path", x.ev.e.HTTP.Path, "err", err)
			return
		}
		p.cfg.PackageCache.debs.put(cat, files)
	}}
	return resp
}

// teeIndex keeps a copy of what it passes on (up to maxDebIndex) and
// hands it to done when the body ended whole.
type teeIndex struct {
	rc   io.ReadCloser
	buf  bytes.Buffer
	over bool
	done func([]byte)
}

func (t *teeIndex) Read(b []byte) (int, error) {
	n, err := t.rc.Read(b)
	if !t.over {
		if t.buf.Len()+n > maxDebIndex {
			t.over, t.buf = true, bytes.Buffer{}
		} else {
			t.buf.Write(b[:n])
		}
	}
	if err == io.EOF && !t.over && t.done != nil {
		t.done(t.buf.Bytes())
		t.done = nil
	}
	return n, err
}

func (t *teeIndex) Close() error { return t.rc.Close() }

// debVersion is what the Packages indices the gate saw say of a .deb.
func (p *Proxy) debVersion(x *exch) pkgmeta.Version {
	pc := p.cfg.PackageCache
	pth := x.ev.e.HTTP.Path
	i := strings.Index(pth, "/pool/")
	if pc == nil || i < 0 {
		return pkgmeta.Version{}
	}
	return pkgmeta.Version{Version: x.pkg.Version, Integrity: pc.debs.get(x.v.Cat.Name, pth[i+1:])}
}
