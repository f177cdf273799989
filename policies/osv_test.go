package policies

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestOSVMatch(t *testing.T) {
	a, err := LoadOSV([]string{"testdata/osv/good"})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Summary(); !slices.Equal(got, []string{"MAL-2026-0001", "MAL-2026-0002", "MAL-2026-0003", "MAL-2026-0101"}) || a.Files() != 5 {
		t.Errorf("loaded %v from %d files (the RubyGems one is skipped)", got, a.Files())
	}
	cases := []struct {
		pkg  Package
		want string
	}{
		{Package{"npm", "gate-mal", "1.0.1"}, "MAL-2026-0001"},
		{Package{"npm", "Gate-Mal", "1.0.1"}, "MAL-2026-0001"},
		{Package{"npm", "gate-mal", "1.0.0"}, ""},
		{Package{"npm", "gate-mal", ""}, ""}, // metadata: only an every-version advisory matches
		{Package{"npm", "gate-evil", ""}, "MAL-2026-0003"},
		{Package{"npm", "gate-evil", "0.0.1"}, "MAL-2026-0003"},
		{Package{"pypi", "gate-mal", "1.1.0"}, "MAL-2026-0002"},
		{Package{"pypi", "gate.mal", "1.1.5"}, "MAL-2026-0002"},
		{Package{"pypi", "gate_mal", "1.2.0"}, ""},
		{Package{"pypi", "gate_mal", "1.0.9"}, ""},
		{Package{"crates", "gate-crate", "0.2.3"}, "MAL-2026-0101"},
		{Package{"crates", "gate-crate", "0.2.4"}, ""},
		{Package{"crates", "gate-crate", "0.1.9"}, ""},
		{Package{"pypi", "gate-evil", "1.0.0"}, ""}, // another ecosystem
	}
	for _, c := range cases {
		adv, ok := a.Match(c.pkg)
		if ok != (c.want != "") || adv.ID != c.want {
			t.Errorf("Match(%+v) = %+v, %v; want %q", c.pkg, adv, ok, c.want)
		}
	}
	if adv, _ := a.Match(Package{"npm", "gate-mal", "1.0.1"}); adv.Code() != "osv:MAL-2026-0001" || !strings.HasSuffix(adv.File, "MAL-2026-0001.json") {
		t.Errorf("advisory %+v", adv)
	}
	var none *Advisories
	if _, ok := none.Match(Package{"npm", "x", "1"}); ok || none.Len() != 0 {
		t.Error("a nil list matched")
	}
}

func TestOSVErrors(t *testing.T) {
	_, err := LoadOSV([]string{"testdata/osv/bad"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"testdata/osv/bad/syntax.json:5:27: invalid character ']'",
		"testdata/osv/bad/noname.json:3: MAL-2026-0201 affected[0].package: want an ecosystem and a name",
		"testdata/osv/bad/fixed-first.json:3: MAL-2026-0202 affected[0].ranges[0]: events[0]: fixed without introduced",
		"testdata/osv/bad/trailing.json:2:1: data after the advisory's object",
		"testdata/osv/bad/type.json:1:8: json: cannot unmarshal number into Go struct field osvDoc.id of type string",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors do not say %q:\n%v", want, err)
		}
	}
	if _, err := LoadOSV([]string{"testdata/osv/missing"}); err == nil || !strings.Contains(err.Error(), "testdata/osv/missing") {
		t.Errorf("a missing directory: %v", err)
	}
}

// TestOSVSpecialFile: a FIFO named like an advisory is refused, not
// opened (which would block the load).
func TestOSVSpecialFile(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "MAL-1.json"), 0o644); err != nil {
		t.Skipf("skipping: mkfifo: %v", err)
	}
	_, err := LoadOSV([]string{dir})
	if err == nil || !strings.Contains(err.Error(), "MAL-1.json") {
		t.Errorf("fifo: %v", err)
	}
	os.Remove(filepath.Join(dir, "MAL-1.json"))
}

func FuzzParseOSV(f *testing.F) {
	for _, name := range []string{"good/npm/MAL-2026-0001.json", "good/other/MAL-2026-0101.json", "bad/syntax.json", "bad/fixed-first.json"} {
		b, err := os.ReadFile(filepath.Join("testdata/osv", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "1.0.1")
	}
	f.Fuzz(func(t *testing.T, data []byte, version string) {
		a, err := ParseOSV("fuzz.json", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.json") {
				t.Fatalf("error without the file name: %v", err)
			}
			return
		}
		for _, eco := range ecosystems {
			a.Match(Package{Ecosystem: eco, Name: "x", Version: version})
		}
	})
}
