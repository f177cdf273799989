package world

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"time"
)

// PyPackage is a package the world's Python simple index serves.
type PyPackage struct {
	Name    string // project name as published
	Version string
	Module  string // the importable module it installs
}

// PyPackages are the projects the simple index holds; evil-stealer is the
// one a test policy denies by name.
var PyPackages = []PyPackage{
	{Name: "airlock-demo", Version: "1.0.0", Module: "airlock_demo"},
	{Name: "evil-stealer", Version: "6.6.6", Module: "evil_stealer"},
}

var pyNormRe = regexp.MustCompile(`[-_.]+`)

// PyNormalize is the PEP 503 normalized form of a project name.
func PyNormalize(name string) string { return strings.ToLower(pyNormRe.ReplaceAllString(name, "-")) }

// WheelName is the wheel file name of p.
func (p PyPackage) WheelName() string {
	return strings.ReplaceAll(PyNormalize(p.Name), "-", "_") + "-" + p.Version + "-py3-none-any.whl"
}

type pyIndex struct {
	pages map[string][]byte // normalized name → project page
	json  map[string][]byte // normalized name → PEP 691 page with PEP 700 upload times
	files map[string][]byte // file name → wheel
	root  []byte
}

func newPyIndex() (*pyIndex, error) {
	ix := &pyIndex{pages: map[string][]byte{}, json: map[string][]byte{}, files: map[string][]byte{}}
	var names []string
	for _, p := range PyPackages {
		whl, err := wheel(p)
		if err != nil {
			return nil, err
		}
		fn := p.WheelName()
		ix.files[fn] = whl
		sum := sha256.Sum256(whl)
		n := PyNormalize(p.Name)
		names = append(names, n)
		ix.pages[n] = fmt.Appendf(nil,
			"<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" content=\"1.0\"><title>Links for %s</title></head><body>\n"+
				"<h1>Links for %s</h1>\n<a href=\"/packages/%s#sha256=%s\">%s</a><br/>\n</body></html>\n",
			html.EscapeString(n), html.EscapeString(n), fn, hex.EncodeToString(sum[:]), fn)
		ix.json[n] = fmt.Appendf(nil, `{"meta":{"api-version":"1.1"},"name":%q,"versions":[%q],"files":[{"filename":%q,"url":"/packages/%s","hashes":{"sha256":%q},"upload-time":%q}]}`,
			n, p.Version, fn, fn, hex.EncodeToString(sum[:]), time.Unix(1700000000, 0).UTC().Format(time.RFC3339))
	}
	sort.Strings(names)
	var b bytes.Buffer
	b.WriteString("<!DOCTYPE html>\n<html><body>\n")
	for _, n := range names {
		fmt.Fprintf(&b, "<a href=\"/simple/%s/\">%s</a><br/>\n", n, n)
	}
	b.WriteString("</body></html>\n")
	ix.root = b.Bytes()
	return ix, nil
}

// wheel builds a pure-Python wheel with a correct RECORD.
func wheel(p PyPackage) ([]byte, error) {
	dist := strings.ReplaceAll(PyNormalize(p.Name), "-", "_") + "-" + p.Version + ".dist-info"
	files := []struct{ name, body string }{
		{p.Module + "/__init__.py", fmt.Sprintf("VALUE = %q\n", p.Name+"=="+p.Version)},
		{dist + "/METADATA", fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: airlock e2e test package\n", p.Name, p.Version)},
		{dist + "/WHEEL", "Wheel-Version: 1.0\nGenerator: airlock-e2e-world\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record strings.Builder
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(name, body string) error {
		h := &zip.FileHeader{Name: name, Method: zip.Deflate, Modified: time.Unix(1700000000, 0)}
		h.SetMode(0o644)
		f, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		_, err = f.Write([]byte(body))
		return err
	}
	for _, f := range files {
		if err := add(f.name, f.body); err != nil {
			return nil, fmt.Errorf("world: wheel %s: %w", p.Name, err)
		}
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString(dist + "/RECORD,,\n")
	if err := add(dist+"/RECORD", record.String()); err != nil {
		return nil, fmt.Errorf("world: wheel %s: %w", p.Name, err)
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (ix *pyIndex) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(rw, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	switch {
	case p == "/simple" || p == "/simple/":
		writeHTML(rw, ix.root)
	case strings.HasPrefix(p, "/simple/"):
		name := PyNormalize(strings.Trim(strings.TrimPrefix(p, "/simple/"), "/"))
		page, ok := ix.pages[name]
		if !ok {
			http.NotFound(rw, r)
			return
		}
		if !strings.HasSuffix(p, "/") {
			http.Redirect(rw, r, p+"/", http.StatusMovedPermanently)
			return
		}
		if strings.Contains(r.Header.Get("Accept"), "application/vnd.pypi.simple.v1+json") {
			rw.Header().Set("Content-Type", "application/vnd.pypi.simple.v1+json")
			_, _ = rw.Write(ix.json[name])
			return
		}
		writeHTML(rw, page)
	case strings.HasPrefix(p, "/packages/"):
		f, ok := ix.files[strings.TrimPrefix(p, "/packages/")]
		if !ok {
			http.NotFound(rw, r)
			return
		}
		rw.Header().Set("Content-Type", "application/octet-stream")
		_, _ = rw.Write(f)
	default:
		http.NotFound(rw, r)
	}
}

func writeHTML(rw http.ResponseWriter, b []byte) {
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = rw.Write(b)
}
