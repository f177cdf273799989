package pkgmeta

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/ulikunitz/xz"
)

// The rewriters parse what a registry (or whoever answers as one) sends:
// they must never panic, and a rewrite must leave none of the hidden
// versions and stay valid JSON.

func FuzzRewriteNPM(f *testing.F) {
	f.Add([]byte(packument), "2.0.0")
	f.Add([]byte(`{"versions":{"1":{}},"dist-tags":{"latest":"1"},"time":{"1":"x"}}`), "1")
	f.Add([]byte(`{"versions":null,"dist-tags":{"a":1}}`), "")
	f.Fuzz(func(t *testing.T, doc []byte, hide string) {
		vs, err := NPMVersions(doc)
		if err != nil {
			return
		}
		out, err := RewriteNPM(doc, map[string]bool{hide: true})
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON %q", out)
		}
		after, err := NPMVersions(out)
		if err != nil {
			t.Fatalf("rewrite unreadable: %v", err)
		}
		for _, v := range after {
			if v.Version == hide {
				t.Fatalf("hidden %q still listed", hide)
			}
		}
		if len(after) < len(vs)-1 {
			t.Fatalf("%d versions became %d", len(vs), len(after))
		}
	})
}

func FuzzRewriteSimpleHTML(f *testing.F) {
	f.Add([]byte(simpleHTML), "2.0.0")
	f.Add([]byte(`<a href="demo-1.0.tar.gz"><a href="demo-2.0.tar.gz">x</a></a>`), "1.0")
	f.Add([]byte(`<a href=`), "")
	f.Fuzz(func(t *testing.T, doc []byte, hide string) {
		out, err := RewriteSimpleHTML(doc, map[string]bool{hide: true})
		if err != nil || hide == "" {
			return
		}
		for _, v := range SimpleHTMLVersions(out) {
			if v == hide {
				t.Fatalf("hidden %q still linked in %q", hide, out)
			}
		}
	})
}

func FuzzRewriteSimpleJSON(f *testing.F) {
	f.Add([]byte(simpleJSON), "2.0.0")
	f.Add([]byte(`{"files":[{"filename":1}],"versions":[1]}`), "1")
	f.Fuzz(func(t *testing.T, doc []byte, hide string) {
		_, _ = SimpleJSONVersions(doc)
		out, err := RewriteSimpleJSON(doc, map[string]bool{hide: true})
		if err != nil {
			return
		}
		vs, err := SimpleJSONVersions(out)
		if err != nil {
			t.Fatalf("rewrite unreadable: %v", err)
		}
		for _, v := range vs {
			if v.Version == hide {
				t.Fatalf("hidden %q still listed", hide)
			}
		}
	})
}

func FuzzRewritePyPIJSON(f *testing.F) {
	f.Add([]byte(pypiJSON), "2.0.0")
	f.Add([]byte(`{"info":{"version":1},"releases":{"1":null}}`), "1")
	f.Fuzz(func(t *testing.T, doc []byte, hide string) {
		_, _ = PyPIJSONVersions(doc)
		out, err := RewritePyPIJSON(doc, map[string]bool{hide: true})
		if err != nil {
			return
		}
		vs, err := PyPIJSONVersions(out)
		if err != nil {
			t.Fatalf("rewrite unreadable: %v", err)
		}
		for _, v := range vs {
			if v.Version == hide {
				t.Fatalf("hidden %q still listed", hide)
			}
		}
	})
}

func FuzzRewriteCratesIndex(f *testing.F) {
	f.Add([]byte(cratesIndex), "1.1.0")
	f.Add([]byte("{\"vers\":\"1\",\"cksum\":\"00\"}\n"), "1")
	f.Add([]byte("\n\r\n{}"), "")
	f.Fuzz(func(t *testing.T, doc []byte, hide string) {
		vs, err := CratesIndexVersions(doc)
		if err != nil {
			return
		}
		out, err := RewriteCratesIndex(doc, map[string]bool{hide: true})
		if err != nil {
			t.Fatalf("a readable index did not rewrite: %v", err)
		}
		after, err := CratesIndexVersions(out)
		if err != nil {
			t.Fatalf("rewrite unreadable: %v", err)
		}
		n := 0
		for _, v := range vs {
			if v.Version != hide {
				n++
			}
		}
		if len(after) != n {
			t.Fatalf("%d versions, %d after hiding %q", len(after), n, hide)
		}
		for _, v := range after {
			if v.Version == hide || v.Integrity == "" {
				t.Fatalf("after the rewrite: %+v", v)
			}
		}
	})
}

func FuzzDebianPackages(f *testing.F) {
	f.Add([]byte(debIndex))
	f.Add([]byte{0x1f, 0x8b, 0, 0})
	f.Add([]byte{0xfd, '7', 'z', 'X', 'Z', 0, 0})
	f.Add([]byte("BZh91AY&SY"))
	for _, c := range []xz.WriterConfig{{CheckSum: xz.CRC32}, {BlockSize: 64, NoCheckSum: true}} {
		var b bytes.Buffer
		w, _ := c.NewWriter(&b)
		w.Write([]byte(debIndex + debIndex))
		w.Close()
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var whole []DebianFile
		errWhole := DebianPackages(doc, 1<<20, func(d DebianFile) {
			if d.Filename == "" || !strings.HasPrefix(d.Integrity, "sha256-") {
				t.Fatalf("a file without a name or a digest: %+v", d)
			}
			whole = append(whole, d)
		})
		// Read as it comes, a few bytes at a time: the same files, the
		// same verdict.
		var n int
		errStream := ReadDebianPackages(iotest.HalfReader(bytes.NewReader(doc)), 1<<20, func(d DebianFile) error {
			if n >= len(whole) || whole[n] != d {
				t.Fatalf("streamed file %d: %+v, read whole: %+v", n, d, whole)
			}
			n++
			return nil
		})
		if fmt.Sprint(errWhole) != fmt.Sprint(errStream) || errWhole == nil && n != len(whole) {
			t.Fatalf("whole: %d files, %v; streamed: %d files, %v", len(whole), errWhole, n, errStream)
		}
	})
}
