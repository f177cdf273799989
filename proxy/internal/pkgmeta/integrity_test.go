package pkgmeta

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"testing"
)

func TestIntegrityFromMetadata(t *testing.T) {
	s1 := sha1.Sum([]byte("x"))
	doc := `{"versions":{
"1.0.0":{"dist":{"integrity":"sha1-AAAA sha512-` + base64.StdEncoding.EncodeToString(make([]byte, 64)) + ` sha256-BBBB","shasum":"00"}},
"1.0.1":{"dist":{"shasum":"` + hex.EncodeToString(s1[:]) + `"}},
"1.0.2":{"dist":{"shasum":"not hex"}},
"1.0.3":{"dist":{"integrity":7}}}}`
	vs, err := NPMVersions([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, v := range vs {
		got[v.Version] = v.Integrity
	}
	want := map[string]string{"1.0.0": "sha512-" + base64.StdEncoding.EncodeToString(make([]byte, 64)),
		"1.0.1": "sha1-" + base64.StdEncoding.EncodeToString(s1[:]), "1.0.2": "", "1.0.3": ""}
	for v, w := range want {
		if got[v] != w {
			t.Errorf("%s: integrity %q, want %q", v, got[v], w)
		}
	}
	sum := sha256.Sum256([]byte("wheel"))
	sri := "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
	page := `{"files":[{"filename":"demo-1.0-py3-none-any.whl","hashes":{"sha256":"` + hex.EncodeToString(sum[:]) + `"}},{"filename":"demo-1.0.tar.gz","hashes":{"md5":"x"}}]}`
	pv, err := SimpleJSONVersions([]byte(page))
	if err != nil || len(pv) != 1 || pv[0].Files["demo-1.0-py3-none-any.whl"] != sri || len(pv[0].Files) != 1 {
		t.Errorf("simple json files: %+v %v", pv, err)
	}
	html := `<a href="/packages/demo-1.0-py3-none-any.whl#sha256=` + hex.EncodeToString(sum[:]) + `">x</a><a href="demo-1.0.tar.gz#md5=00">y</a>`
	if f := SimpleHTMLFiles([]byte(html)); len(f) != 1 || f["demo-1.0-py3-none-any.whl"] != sri {
		t.Errorf("html files: %v", f)
	}
	if h, want, err := ParseSRI(sri); err != nil || h.Size() != len(want) {
		t.Errorf("ParseSRI: %v", err)
	}
	for _, bad := range []string{"", "sha256", "md5-AAAA", "sha256-!!", "sha256-AAAA"} {
		if _, _, err := ParseSRI(bad); err == nil {
			t.Errorf("ParseSRI(%q): no error", bad)
		}
	}
}
