package pkgmeta

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

const packument = `{"name":"left-pad","dist-tags":{"latest":"2.0.0","next":"3.0.0-rc.1","old":"1.0.0"},
"versions":{"1.0.0":{"version":"1.0.0"},"1.2.0":{"version":"1.2.0","scripts":{"postinstall":"node x.js","test":"t"}},
"2.0.0":{"version":"2.0.0","hasInstallScript":true},"3.0.0-rc.1":{"version":"3.0.0-rc.1"},"9.9.9":{"version":"9.9.9"}},
"time":{"created":"2020-01-01T00:00:00Z","1.0.0":"2020-01-01T00:00:00.000Z","1.2.0":"2021-01-01T00:00:00Z","2.0.0":"2026-11-30T00:00:00Z","3.0.0-rc.1":"not a time"}}`

func TestNPMVersions(t *testing.T) {
	vs, err := NPMVersions([]byte(packument))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Version{}
	for _, v := range vs {
		got[v.Version] = v
	}
	if len(got) != 5 || !got["1.2.0"].InstallScript || !got["2.0.0"].InstallScript || got["1.0.0"].InstallScript {
		t.Errorf("install scripts: %+v", got)
	}
	if !got["1.0.0"].Published.Equal(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)) || !got["3.0.0-rc.1"].Published.IsZero() || !got["9.9.9"].Published.IsZero() {
		t.Errorf("times: %+v", got)
	}
}

func TestRewriteNPM(t *testing.T) {
	cases := []struct {
		name   string
		hidden []string
		want   []string
		tags   map[string]string
	}{
		{"latest hidden moves down, not up to an untagged higher version", []string{"2.0.0"}, []string{"1.0.0", "1.2.0", "3.0.0-rc.1", "9.9.9"},
			map[string]string{"latest": "1.2.0", "next": "3.0.0-rc.1", "old": "1.0.0"}},
		{"tags naming hidden versions dropped", []string{"2.0.0", "3.0.0-rc.1", "1.0.0"}, []string{"1.2.0", "9.9.9"},
			map[string]string{"latest": "1.2.0"}},
		{"only higher versions left", []string{"1.0.0", "1.2.0", "2.0.0"}, []string{"3.0.0-rc.1", "9.9.9"},
			map[string]string{"latest": "9.9.9", "next": "3.0.0-rc.1"}},
		{"everything hidden", []string{"1.0.0", "1.2.0", "2.0.0", "3.0.0-rc.1", "9.9.9"}, nil, map[string]string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hidden := map[string]bool{}
			for _, v := range c.hidden {
				hidden[v] = true
			}
			out, err := RewriteNPM([]byte(packument), hidden)
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				DistTags map[string]string          `json:"dist-tags"`
				Versions map[string]json.RawMessage `json:"versions"`
				Time     map[string]any             `json:"time"`
				Name     string
			}
			if err := json.Unmarshal(out, &doc); err != nil {
				t.Fatal(err)
			}
			var got []string
			for v := range doc.Versions {
				got = append(got, v)
				if _, ok := doc.Time[v]; !ok && v != "9.9.9" {
					t.Errorf("time lost %s", v)
				}
			}
			sort.Strings(got)
			if !slices.Equal(got, c.want) || doc.Name != "left-pad" {
				t.Errorf("versions %v want %v", got, c.want)
			}
			for _, v := range c.hidden {
				if _, ok := doc.Time[v]; ok {
					t.Errorf("time keeps hidden %s", v)
				}
			}
			if len(doc.DistTags) != len(c.tags) {
				t.Errorf("dist-tags %v want %v", doc.DistTags, c.tags)
			}
			for k, v := range c.tags {
				if doc.DistTags[k] != v {
					t.Errorf("dist-tags %v want %v", doc.DistTags, c.tags)
				}
			}
		})
	}
}

func TestNPMBadInput(t *testing.T) {
	for _, doc := range []string{``, `[]`, `null`, `{"versions":[]}`, `{"versions":{"1":"x"}}`, `{"time":[1]}`, `{"versions":{"1.0.0":{"scripts":"x"}}}`, `{"dist-tags":1,"versions":{}}`} {
		_, err1 := NPMVersions([]byte(doc))
		_, err2 := RewriteNPM([]byte(doc), map[string]bool{"1": true})
		if err1 == nil && err2 == nil {
			t.Errorf("%q: no error", doc)
		}
	}
}

const simpleHTML = `<!DOCTYPE html><html><body><h1>Links</h1>
<a href="/packages/aa/demo-1.0.0-py3-none-any.whl#sha256=00" data-requires-python="&gt;=3">demo-1.0.0-py3-none-any.whl</a><br/>
<a href="https://files.example.test/packages/bb/demo-2.0.0.tar.gz#sha256=11">demo-2.0.0.tar.gz</a><br/>
<A HREF="../../packages/cc/demo-2.0.0-py3-none-any.whl">demo-2.0.0-py3-none-any.whl</A><br/>
<a href="/packages/dd/demo-2.0.0-py2-none-any.whl"/><br/>
<!-- <a href="x-9.tar.gz"> --></body></html>`

func TestRewriteSimpleHTML(t *testing.T) {
	if got := SimpleHTMLVersions([]byte(simpleHTML)); !slices.Equal(got, []string{"1.0.0", "2.0.0"}) {
		t.Errorf("versions %v", got)
	}
	out, err := RewriteSimpleHTML([]byte(simpleHTML), map[string]bool{"2.0.0": true})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	if strings.Contains(s, "demo-2.0.0") || !strings.Contains(s, `<a href="/packages/aa/demo-1.0.0-py3-none-any.whl#sha256=00" data-requires-python="&gt;=3">demo-1.0.0-py3-none-any.whl</a>`) ||
		!strings.Contains(s, "<!-- <a href=\"x-9.tar.gz\"> -->") {
		t.Errorf("rewritten:\n%s", s)
	}
	same, _ := RewriteSimpleHTML([]byte(simpleHTML), nil)
	if string(same) != simpleHTML {
		t.Errorf("nothing hidden changed the page:\n%s", same)
	}
}

const simpleJSON = `{"meta":{"api-version":"1.1"},"name":"demo","versions":["1.0.0","2.0.0"],"files":[
{"filename":"demo-1.0.0-py3-none-any.whl","url":"x","hashes":{},"upload-time":"2020-01-01T00:00:00.123456Z"},
{"filename":"demo-1.0.0.tar.gz","url":"y","hashes":{},"upload-time":"2019-01-01T00:00:00Z"},
{"filename":"demo-2.0.0.tar.gz","url":"z","hashes":{}}]}`

func TestSimpleJSON(t *testing.T) {
	vs, err := SimpleJSONVersions([]byte(simpleJSON))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]time.Time{}
	for _, v := range vs {
		got[v.Version] = v.Published
	}
	if !got["1.0.0"].Equal(time.Date(2019, 1, 1, 0, 0, 0, 0, time.UTC)) || !got["2.0.0"].IsZero() || len(got) != 2 {
		t.Errorf("versions %v (want the earliest upload per version)", got)
	}
	out, err := RewriteSimpleJSON([]byte(simpleJSON), map[string]bool{"2.0.0": true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "2.0.0") || !strings.Contains(string(out), `"versions":["1.0.0"]`) {
		t.Errorf("rewritten %s", out)
	}
}

const pypiJSON = `{"info":{"name":"demo","version":"2.0.0"},"urls":[{"filename":"demo-2.0.0.tar.gz"}],
"releases":{"1.0.0":[{"filename":"demo-1.0.0.tar.gz","upload_time_iso_8601":"2020-01-01T00:00:00.000000Z"}],"2.0.0":[{"filename":"demo-2.0.0.tar.gz","upload_time_iso_8601":"2026-11-30T00:00:00Z"}],"0.1":[]}}`

func TestPyPIJSON(t *testing.T) {
	vs, err := PyPIJSONVersions([]byte(pypiJSON))
	if err != nil || len(vs) != 3 {
		t.Fatalf("%v %v", vs, err)
	}
	out, err := RewritePyPIJSON([]byte(pypiJSON), map[string]bool{"2.0.0": true})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Info     map[string]string
		URLs     []any
		Releases map[string]any
	}
	json.Unmarshal(out, &doc)
	if doc.Info["version"] != "1.0.0" || len(doc.URLs) != 0 || len(doc.Releases) != 2 || doc.Info["name"] != "demo" {
		t.Errorf("rewritten %s", out)
	}
}

func TestCompareSemver(t *testing.T) {
	order := []string{"0.9.0", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-beta", "1.0.0", "1.0.1", "1.2.0", "1.10.0", "2.0.0"}
	for i := range order {
		for j := range order {
			got := CompareSemver(order[i], order[j])
			if (i < j) != (got < 0) || (i == j) != (got == 0) {
				t.Errorf("CompareSemver(%s, %s) = %d", order[i], order[j], got)
			}
		}
	}
}

// TestRewriteNPMInPlace: members are found past strings holding quotes
// and braces, duplicates are all rewritten, the rest is kept byte for
// byte, and a missing dist-tags is added.
func TestRewriteNPMInPlace(t *testing.T) {
	doc := `{ "readme" : "a \"}{\" b\\" , "versions":{"1.0.0":{"d":"}"},"2.0.0":{}} ,"versions":{"2.0.0":[1,{"x":"]"}]},"n":[true,false,null,-1.5e3]}`
	out, err := RewriteNPM([]byte(doc), map[string]bool{"2.0.0": true})
	if err != nil {
		t.Fatal(err)
	}
	want := `{ "readme" : "a \"}{\" b\\" , "versions":{"1.0.0":{"d":"}"}} ,"versions":{},"n":[true,false,null,-1.5e3],"dist-tags":{"latest":"1.0.0"}}`
	if string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
}

const cratesIndex = `{"name":"gate-crate","vers":"1.0.0","deps":[],"cksum":"` + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" + `","features":{},"yanked":false,"pubtime":"2026-01-02T03:04:05Z"}
{"name":"gate-crate","vers":"1.1.0","deps":[],"cksum":"` + "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" + `","features":{},"yanked":false}
`

// TestCratesIndex: an index file's versions with their sha256 and
// publish time (when given); hiding one drops its line; a line that is
// not a version with a checksum is refused naming it.
func TestCratesIndex(t *testing.T) {
	vs, err := CratesIndexVersions([]byte(cratesIndex))
	if err != nil || len(vs) != 2 {
		t.Fatalf("%v %v", vs, err)
	}
	if vs[0].Version != "1.0.0" || vs[0].Published.IsZero() || !strings.HasPrefix(vs[0].Integrity, "sha256-qqqq") || !vs[1].Published.IsZero() {
		t.Errorf("versions %+v", vs)
	}
	out, err := RewriteCratesIndex([]byte(cratesIndex), map[string]bool{"1.1.0": true})
	if err != nil || strings.Contains(string(out), "1.1.0") || !strings.Contains(string(out), `"vers":"1.0.0"`) {
		t.Errorf("rewrite %q %v", out, err)
	}
	for doc, want := range map[string]string{
		"{\"vers\":\"1.0.0\"}\n":                         "line 1: want a version (vers) and its sha256 (cksum)",
		"\n{\"vers\":\"1\",\"cksum\":\"zz\"}":            "line 2: want a version",
		"{\"vers\":\"1\",\"VERS\":\"2\",\"cksum\":\"\"}": `line 1: member "VERS": a member name that differs`,
		"not json\n": "line 1: invalid character",
	} {
		if _, err := CratesIndexVersions([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %s", doc, err, want)
		}
	}
}

const debIndex = "Package: a\nVersion: 1.0-1\nDescription: x\n more\nFilename: pool/main/a/a/a_1.0-1_amd64.deb\nSHA256: " +
	"cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc\n\nPackage: b\nVersion: 2\nFilename: pool/b.deb\n\n"

// TestDebianPackages: a Packages index, plain or gzip, gives each .deb
// with a SHA256 (a stanza without one is skipped); a Release file or an
// index over the bound is refused.
func TestDebianPackages(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(debIndex))
	zw.Close()
	for name, doc := range map[string][]byte{"plain": []byte(debIndex), "gzip": gz.Bytes()} {
		var got []DebianFile
		if err := DebianPackages(doc, 1<<20, func(f DebianFile) { got = append(got, f) }); err != nil || len(got) != 1 ||
			got[0].Package != "a" || got[0].Version != "1.0-1" || got[0].Filename != "pool/main/a/a/a_1.0-1_amd64.deb" || !strings.HasPrefix(got[0].Integrity, "sha256-zMzM") {
			t.Errorf("%s: %+v %v", name, got, err)
		}
	}
	for doc, want := range map[string]string{
		"Origin: Debian\nSuite: stable\nSHA256:\n 0123 100 main/binary-amd64/Packages\n": "not a Debian Packages index",
		"just text\n":      "line 1: not a Debian Packages index",
		debIndex + "zzz\n": "want \"Field: value\"",
	} {
		if err := DebianPackages([]byte(doc), 1<<20, func(DebianFile) {}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %s", doc, err, want)
		}
	}
	if err := DebianPackages([]byte(debIndex), 10, func(DebianFile) {}); err == nil || !strings.Contains(err.Error(), "over 10 bytes") {
		t.Errorf("bound: %v", err)
	}
}
