package world

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

// NPMPackage is a package the world's npm registry serves.
type NPMPackage struct {
	Name    string
	Version string
	Deps    map[string]string
}

// NPMPackages are the packages the npm registry holds. @evil/stealer is
// the one a test policy denies by name.
var NPMPackages = []NPMPackage{
	{Name: "airlock-demo", Version: "1.0.0", Deps: map[string]string{"airlock-helper": "^1.0.0"}},
	{Name: "airlock-helper", Version: "1.0.0"},
	{Name: "@evil/stealer", Version: "6.6.6"},
}

// npmRegistry is a static registry: one packument per package and one
// tarball per version, generated at start.
type npmRegistry struct {
	packuments map[string][]byte // name → JSON
	tarballs   map[string][]byte // path → .tgz
}

func npmTarballPath(p NPMPackage) string {
	base := p.Name
	if i := strings.LastIndexByte(base, '/'); i >= 0 {
		base = base[i+1:]
	}
	return "/" + p.Name + "/-/" + base + "-" + p.Version + ".tgz"
}

func newNPMRegistry(baseURL string) (*npmRegistry, error) {
	reg := &npmRegistry{packuments: map[string][]byte{}, tarballs: map[string][]byte{}}
	for _, p := range NPMPackages {
		tgz, err := npmTarball(p)
		if err != nil {
			return nil, err
		}
		tp := npmTarballPath(p)
		reg.tarballs[tp] = tgz
		doc, err := packument(p, baseURL+tp, tgz)
		if err != nil {
			return nil, err
		}
		reg.packuments[p.Name] = doc
	}
	return reg, nil
}

func packument(p NPMPackage, tarballURL string, tgz []byte) ([]byte, error) {
	s1 := sha1.Sum(tgz)
	s512 := sha512.Sum512(tgz)
	ver := map[string]any{
		"name":    p.Name,
		"version": p.Version,
		"main":    "index.js",
		"dist": map[string]any{
			"tarball":   tarballURL,
			"shasum":    hex.EncodeToString(s1[:]),
			"integrity": "sha512-" + base64.StdEncoding.EncodeToString(s512[:]),
		},
	}
	if len(p.Deps) > 0 {
		ver["dependencies"] = p.Deps
	}
	now := time.Unix(1700000000, 0).UTC().Format(time.RFC3339)
	doc := map[string]any{
		"name":      p.Name,
		"dist-tags": map[string]string{"latest": p.Version},
		"versions":  map[string]any{p.Version: ver},
		"time":      map[string]string{"created": now, "modified": now, p.Version: now},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("world: packument %s: %w", p.Name, err)
	}
	return b, nil
}

func npmTarball(p NPMPackage) ([]byte, error) {
	pj := map[string]any{"name": p.Name, "version": p.Version, "main": "index.js", "license": "MIT"}
	if len(p.Deps) > 0 {
		pj["dependencies"] = p.Deps
	}
	pjb, err := json.MarshalIndent(pj, "", "  ")
	if err != nil {
		return nil, err
	}
	files := []struct {
		name string
		body []byte
	}{
		{"package/package.json", pjb},
		{"package/index.js", fmt.Appendf(nil, "module.exports = %q;\n", p.Name+"@"+p.Version)},
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: time.Unix(1700000000, 0), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("world: tarball %s: %w", p.Name, err)
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, fmt.Errorf("world: tarball %s: %w", p.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (reg *npmRegistry) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(rw, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p, err := url.PathUnescape(r.URL.EscapedPath())
	if err != nil {
		http.Error(rw, "bad path", http.StatusBadRequest)
		return
	}
	p = path.Clean(p)
	if tgz, ok := reg.tarballs[p]; ok {
		rw.Header().Set("Content-Type", "application/octet-stream")
		_, _ = rw.Write(tgz)
		return
	}
	if doc, ok := reg.packuments[strings.TrimPrefix(p, "/")]; ok {
		rw.Header().Set("Content-Type", "application/json")
		_, _ = rw.Write(doc)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(http.StatusNotFound)
	_, _ = rw.Write([]byte(`{"error":"not found"}`))
}
