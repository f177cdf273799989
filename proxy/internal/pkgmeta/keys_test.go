package pkgmeta

import (
	"errors"
	"testing"
)

// TestCaseVariantKeysRefused: encoding/json matches member names to
// struct fields case-insensitively; npm and pip do not. The fuzzer found a
// PEP 691 page with "filEs" that this package read as files while the
// rewrite (exact names, like pip) left it alone. Worse, a version's
// package.json can carry "SCRIPTS": {} after "scripts": {postinstall},
// which hid the install script from the gate while npm runs it. Every such
// document is refused (the proxy fails closed), and exact ones still read.
func TestCaseVariantKeysRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		read func([]byte) error
		doc  string
	}{
		{"simple json files", func(d []byte) error { _, err := SimpleJSONVersions(d); return err },
			`{"filEs":[{"filename":"demo-1.0.tar.gz"}]}`},
		{"simple json upload time", func(d []byte) error { _, err := SimpleJSONVersions(d); return err },
			`{"files":[{"filename":"demo-2.0.tar.gz","Upload-Time":"2000-01-01T00:00:00Z"}]}`},
		{"simple json rewrite", func(d []byte) error { _, err := RewriteSimpleJSON(d, map[string]bool{"1.0": true}); return err },
			`{"files":[{"filename":"demo-1.0.tar.gz"}],"FILES":[]}`},
		{"npm scripts shadowed", func(d []byte) error { _, err := NPMVersions(d); return err },
			`{"name":"demo","versions":{"1.0.0":{"scripts":{"postinstall":"x"},"SCRIPTS":{}}},"time":{"1.0.0":"2000-01-01T00:00:00Z"}}`},
		{"npm rewrite", func(d []byte) error { _, err := RewriteNPM(d, map[string]bool{"1.0.0": true}); return err },
			`{"name":"demo","versions":{"1.0.0":{"dist":{"Integrity":"sha512-x"}}}}`},
		{"npm scripts escaped", func(d []byte) error { _, err := NPMVersions(d); return err },
			`{"name":"demo","versions":{"1.0.0":{"scripts":{"postinstall":"x"},"\u0053CRIPTS":{}}}}`},
		{"npm scripts long s", func(d []byte) error { _, err := NPMVersions(d); return err },
			`{"name":"demo","versions":{"1.0.0":{"scripts":{"postinstall":"x"},"\u017fcripts":{}}}}`},
		{"pypi json escaped", func(d []byte) error { _, err := PyPIJSONVersions(d); return err },
			`{"releases":{"1.0":[{"filename":"demo-1.0.tar.gz"}]},"\u0052eleases":{}}`},
		{"pypi json", func(d []byte) error { _, err := PyPIJSONVersions(d); return err },
			`{"releases":{"1.0":[{"filename":"demo-1.0.tar.gz","Digests":{"sha256":"00"}}]}}`},
	} {
		if err := c.read([]byte(c.doc)); !errors.Is(err, errAmbiguousKey) {
			t.Errorf("%s: %v, want the ambiguous member refused", c.name, err)
		}
	}
	for name, doc := range map[string]string{
		"simple json": `{"meta":{"api-version":"1.1"},"files":[{"filename":"demo-1.0.tar.gz","upload-time":"2000-01-01T00:00:00Z","hashes":{"sha256":"00"}}]}`,
		"npm":         `{"name":"demo","versions":{"1.0.0":{"scripts":{"test":"x"},"dist":{"integrity":"sha512-x"}}},"time":{"1.0.0":"2000-01-01T00:00:00Z"}}`,
	} {
		if err := checkKeys([]byte(doc)); err != nil {
			t.Errorf("%s: exact names refused: %v", name, err)
		}
	}
	if err := checkKeys([]byte(`{"files":[{"filename":"a"}],"nested":{"deep":[{"x":{"y":[1,2,{"z":"w"}]}}]},"s":"Files"}`)); err != nil {
		t.Errorf("exact names and a value spelled like a name: %v", err)
	}
}
