package pkgreg

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
)

var normRe = regexp.MustCompile(`[-_.]+`)

// Normalize is the PEP 503 normalized form of a project name.
func Normalize(name string) string { return strings.ToLower(normRe.ReplaceAllString(name, "-")) }

// WheelName is the wheel file name of a project's version.
func WheelName(name, version string) string {
	return strings.ReplaceAll(Normalize(name), "-", "_") + "-" + version + "-py3-none-any.whl"
}

// SdistName is the source distribution file name of a project's version.
func SdistName(name, version string) string { return Normalize(name) + "-" + version + ".tar.gz" }

// Module is the module a project's wheel installs.
func Module(name string) string { return strings.ReplaceAll(Normalize(name), "-", "_") }

func npmTarballPath(name, version string) string {
	base := name[strings.LastIndexByte(name, '/')+1:]
	return "/" + name + "/-/" + base + "-" + version + ".tgz"
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func npmVersionDoc(name string, v Version, tarballURL string, tgz []byte, abbreviated bool) map[string]any {
	s1, s512 := sha1.Sum(tgz), sha512.Sum512(tgz)
	ver := map[string]any{"name": name, "version": v.Version, "dist": map[string]any{"tarball": tarballURL,
		"shasum": hex.EncodeToString(s1[:]), "integrity": "sha512-" + base64.StdEncoding.EncodeToString(s512[:])}}
	if len(v.Deps) > 0 {
		ver["dependencies"] = v.Deps
	}
	if v.Script != "" {
		if abbreviated {
			ver["hasInstallScript"] = true
		} else {
			ver["scripts"] = map[string]string{"postinstall": v.Script}
		}
	}
	if !abbreviated {
		ver["main"] = "index.js"
	}
	return ver
}

func npmTarball(name string, v Version) ([]byte, error) {
	pj := map[string]any{"name": name, "version": v.Version, "main": "index.js", "license": "MIT"}
	if len(v.Deps) > 0 {
		pj["dependencies"] = v.Deps
	}
	if v.Script != "" {
		pj["scripts"] = map[string]string{"postinstall": v.Script}
	}
	pjb, err := json.MarshalIndent(pj, "", "  ")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct {
		name string
		body []byte
	}{{"package/package.json", pjb}, {"package/index.js", fmt.Appendf(nil, "module.exports = %q;\n", name+"@"+v.Version)}, {"package/pad.bin", padding(v.Pad)}} {
		h := &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: time.Unix(1700000000, 0), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("pkgreg: tarball %s: %w", name, err)
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, fmt.Errorf("pkgreg: tarball %s: %w", name, err)
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

// wheel builds a pure-Python wheel with a correct RECORD whose module
// holds VALUE = "name==version".
func wheel(name, version string) ([]byte, error) {
	dist := Module(name) + "-" + version + ".dist-info"
	files := []struct{ name, body string }{
		{Module(name) + "/__init__.py", fmt.Sprintf("VALUE = %q\n", name+"=="+version)},
		{dist + "/METADATA", fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: airlock test package\n", name, version)},
		{dist + "/WHEEL", "Wheel-Version: 1.0\nGenerator: airlock-pkgreg\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record strings.Builder
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(n, body string) error {
		h := &zip.FileHeader{Name: n, Method: zip.Deflate, Modified: time.Unix(1700000000, 0)}
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
			return nil, fmt.Errorf("pkgreg: wheel %s: %w", name, err)
		}
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString(dist + "/RECORD,,\n")
	if err := add(dist+"/RECORD", record.String()); err != nil {
		return nil, fmt.Errorf("pkgreg: wheel %s: %w", name, err)
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// padding is n bytes that do not compress (a fixed pseudo-random stream).
func padding(n int) []byte {
	b := make([]byte, n)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}
