// Package pkgreg is a fake package registry for tests: an npm registry
// (full and abbreviated packuments, tarballs) and a Python index (PEP 503
// HTML and PEP 691 JSON simple pages with PEP 700 upload times, the
// /pypi/NAME/json API, wheels) whose versions have controlled ages and
// install scripts. It is served by the e2e world and by the proxy's
// package-gate tests; it never names a real registry.
package pkgreg

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"
)

// Version is one published version.
type Version struct {
	Version string
	Age     time.Duration     // published this long before the registry was built
	NoTime  bool              // the metadata gives no publish time
	Script  string            // npm: a postinstall script
	Deps    map[string]string // npm dependencies
	Tamper  bool              // the artifact served is not the one the metadata's digests are of
	Pad     int               // npm: bytes of incompressible padding in the tarball
	Sdist   bool              // PyPI: a source distribution (NAME-VER.tar.gz) besides the wheel
	NoWheel bool              // PyPI: no wheel (with Sdist: a source-only release)
}

// pyFiles are the file names of a PyPI version.
func pyFiles(name string, v Version) []string {
	var out []string
	if !v.NoWheel {
		out = append(out, WheelName(name, v.Version))
	}
	if v.Sdist {
		out = append(out, SdistName(name, v.Version))
	}
	return out
}

// Package is a package and its versions; Latest is npm's dist-tags.latest
// (default: the last version).
type Package struct {
	Name     string
	Versions []Version
	Latest   string
}

// Registry serves the packages. Safe for concurrent use.
type Registry struct {
	base   string
	built  time.Time
	npm    map[string]*Package
	py     map[string]*Package
	files  map[string][]byte // path -> tarball or wheel, as served
	orig   map[string][]byte // path -> the artifact the metadata's digests are of
	mu     sync.Mutex
	served []Hit
}

// Hit is a request the registry answered.
type Hit struct {
	Path, Accept string
}

// New builds a registry served at baseURL ("https://registry.example.test:8443").
func New(baseURL string, npm, py []Package) (*Registry, error) {
	r := &Registry{base: strings.TrimSuffix(baseURL, "/"), built: time.Now().UTC(), npm: map[string]*Package{},
		py: map[string]*Package{}, files: map[string][]byte{}, orig: map[string][]byte{}}
	for i := range npm {
		p := &npm[i]
		r.npm[p.Name] = p
		for _, v := range p.Versions {
			tgz, err := npmTarball(p.Name, v)
			if err != nil {
				return nil, err
			}
			r.add(npmTarballPath(p.Name, v.Version), tgz, v.Tamper)
		}
	}
	for i := range py {
		p := &py[i]
		r.py[Normalize(p.Name)] = p
		for _, v := range p.Versions {
			whl, err := wheel(p.Name, v.Version)
			if err != nil {
				return nil, err
			}
			if !v.NoWheel {
				r.add("/packages/"+WheelName(p.Name, v.Version), whl, v.Tamper)
			}
			if v.Sdist {
				r.add("/packages/"+SdistName(p.Name, v.Version), append([]byte("sdist of "), whl...), v.Tamper)
			}
		}
	}
	return r, nil
}

func (r *Registry) add(p string, b []byte, tamper bool) {
	r.orig[p] = b
	if tamper {
		t := append([]byte(nil), b...)
		t[len(t)/2] ^= 0xff
		b = t
	}
	r.files[p] = b
}

// Artifact is the artifact at path as the metadata's digests describe
// it (before any Tamper), nil when there is none.
func (r *Registry) Artifact(path string) []byte { return r.orig[path] }

// NPMTarballPath is the path of an npm version's tarball.
func NPMTarballPath(name, version string) string { return npmTarballPath(name, version) }

// Published is when v was published.
func (r *Registry) Published(v Version) time.Time { return r.built.Add(-v.Age).Truncate(time.Second) }

// Hits returns the requests served so far.
func (r *Registry) Hits() []Hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Hit(nil), r.served...)
}

func (r *Registry) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	p, err := url.PathUnescape(req.URL.EscapedPath())
	if err != nil || req.Method != http.MethodGet && req.Method != http.MethodHead {
		http.Error(rw, "bad request", http.StatusBadRequest)
		return
	}
	p = path.Clean(p)
	r.mu.Lock()
	r.served = append(r.served, Hit{Path: p, Accept: req.Header.Get("Accept")})
	r.mu.Unlock()
	accept := req.Header.Get("Accept")
	switch {
	case r.files[p] != nil:
		rw.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(rw, req, path.Base(p), r.built, bytes.NewReader(r.files[p])) // Range honoured

	case strings.HasPrefix(p, "/simple/"):
		r.simple(rw, Normalize(strings.TrimPrefix(p, "/simple/")), accept)
	case strings.HasPrefix(p, "/pypi/") && strings.HasSuffix(p, "/json"):
		r.pypiJSON(rw, Normalize(strings.TrimSuffix(strings.TrimPrefix(p, "/pypi/"), "/json")))
	case r.npm[strings.TrimPrefix(p, "/")] != nil:
		r.packument(rw, r.npm[strings.TrimPrefix(p, "/")], strings.Contains(accept, "application/vnd.npm.install-v1+json"))
	default:
		http.NotFound(rw, req)
	}
}

func (r *Registry) latest(p *Package) string {
	if p.Latest != "" {
		return p.Latest
	}
	return p.Versions[len(p.Versions)-1].Version
}

func writeJSON(rw http.ResponseWriter, ctype string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", ctype)
	_, _ = rw.Write(b)
}

// packument serves the full document, or the abbreviated one (no
// "time", as registries serve it) when the client asks for it.
func (r *Registry) packument(rw http.ResponseWriter, p *Package, abbreviated bool) {
	versions, times := map[string]any{}, map[string]string{}
	for _, v := range p.Versions {
		tgz := r.orig[npmTarballPath(p.Name, v.Version)]
		ver := npmVersionDoc(p.Name, v, r.base+npmTarballPath(p.Name, v.Version), tgz, abbreviated)
		versions[v.Version] = ver
		if !v.NoTime {
			times[v.Version] = r.Published(v).Format(time.RFC3339)
		}
	}
	doc := map[string]any{"name": p.Name, "dist-tags": map[string]string{"latest": r.latest(p)}, "versions": versions,
		"modified": r.built.Format(time.RFC3339)}
	if abbreviated {
		writeJSON(rw, "application/vnd.npm.install-v1+json", doc)
		return
	}
	times["created"], times["modified"] = r.built.Add(-365*24*time.Hour).Format(time.RFC3339), r.built.Format(time.RFC3339)
	doc["time"] = times
	writeJSON(rw, "application/json", doc)
}

func (r *Registry) simple(rw http.ResponseWriter, name, accept string) {
	name = strings.Trim(name, "/")
	p := r.py[name]
	if p == nil {
		http.NotFound(rw, nil)
		return
	}
	if strings.Contains(accept, "application/vnd.pypi.simple.v1+json") && !strings.Contains(accept, "application/vnd.pypi.simple.v1+json;q=0") {
		var files []map[string]any
		var vs []string
		for _, v := range p.Versions {
			for _, fn := range pyFiles(p.Name, v) {
				f := map[string]any{"filename": fn, "url": "/packages/" + fn, "hashes": map[string]string{"sha256": sha256Hex(r.orig["/packages/"+fn])}}
				if !v.NoTime {
					f["upload-time"] = r.Published(v).Format(time.RFC3339)
				}
				files = append(files, f)
			}
			vs = append(vs, v.Version)
		}
		writeJSON(rw, "application/vnd.pypi.simple.v1+json", map[string]any{"meta": map[string]string{"api-version": "1.1"},
			"name": name, "files": files, "versions": vs})
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" content=\"1.0\"><title>Links for %s</title></head><body>\n<h1>Links for %s</h1>\n", name, name)
	for _, v := range p.Versions {
		for _, fn := range pyFiles(p.Name, v) {
			fmt.Fprintf(&b, "<a href=\"/packages/%s#sha256=%s\">%s</a><br/>\n", fn, sha256Hex(r.orig["/packages/"+fn]), fn)
		}
	}
	b.WriteString("</body></html>\n")
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = rw.Write([]byte(b.String()))
}

func (r *Registry) pypiJSON(rw http.ResponseWriter, name string) {
	p := r.py[name]
	if p == nil {
		http.NotFound(rw, nil)
		return
	}
	releases := map[string]any{}
	var urls []map[string]any
	for _, v := range p.Versions {
		var files []map[string]any
		for _, fn := range pyFiles(p.Name, v) {
			f := map[string]any{"filename": fn, "url": r.base + "/packages/" + fn, "digests": map[string]string{"sha256": sha256Hex(r.orig["/packages/"+fn])}}
			if !v.NoTime {
				f["upload_time_iso_8601"] = r.Published(v).Format(time.RFC3339)
			}
			files = append(files, f)
		}
		releases[v.Version] = files
		if v.Version == r.latest(p) {
			urls = files
		}
	}
	writeJSON(rw, "application/json", map[string]any{"info": map[string]any{"name": p.Name, "version": r.latest(p)},
		"releases": releases, "urls": urls})
}
