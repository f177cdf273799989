package policies

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestExamples: every example policy loads, has its own tests, and they
// all pass; every host it names is under .test.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("examples/*.toml")
	if err != nil || len(files) < 4 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, want := range []string{"coding-agent", "ci-runner", "data-agent", "locked-down"} {
		if _, err := os.Stat(filepath.Join("examples", want+".toml")); err != nil {
			t.Errorf("missing example %s.toml", want)
		}
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			p, err := Load(f)
			if err != nil {
				t.Fatalf("Load:\n%v", err)
			}
			for _, w := range p.Warnings() { // the examples pass check --strict
				t.Errorf("warning: %v", w)
			}
			results := p.RunTests()
			if len(results) < 5 {
				t.Errorf("only %d tests; each example should test what it promises", len(results))
			}
			sawDeny, sawAllow := false, false
			for _, r := range results {
				if !r.Pass {
					t.Errorf("%s: %s: %v", r.Case.Pos, r.Case.Line, r.Problems)
				}
				sawDeny = sawDeny || r.Case.Expect == ActionDeny
				sawAllow = sawAllow || r.Case.Expect.Allows() || r.Case.Expect == ActionAsk
			}
			if !sawDeny || !sawAllow {
				t.Errorf("tests should cover both allowed and denied requests")
			}
			for _, c := range p.Categories() {
				for _, h := range c.Hosts {
					if !strings.HasSuffix(h, ".test") {
						t.Errorf("category %s names %q: examples use .test names only", c.Name, h)
					}
				}
			}
		})
	}
}

var tomlBlock = regexp.MustCompile("(?s)```toml\n(.*?)```")

// TestDocExamples parses every ```toml block of docs/policy.md. A block
// that starts with "# invalid" must fail and show its error, one that
// starts with "# warns" must load with warnings, any other must load
// without (it passes check --strict); a block that
// is a fragment (no version line) is checked with "version = 1" added.
// Lockfiles the examples name are in testdata/docs/locks.
func TestDocExamples(t *testing.T) {
	data, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := tomlBlock.FindAllStringSubmatch(string(data), -1)
	if len(blocks) < 10 {
		t.Fatalf("docs/policy.md has %d toml examples, want at least 10", len(blocks))
	}
	for i, b := range blocks {
		src := b[1]
		invalid := strings.HasPrefix(src, "# invalid")
		warns := strings.HasPrefix(src, "# warns")
		if !strings.Contains(src, "version =") {
			src = "version = 1\n" + src
		}
		// Named under testdata/docs, so that the lockfiles an example
		// names are read from there.
		p, err := Parse("testdata/docs/policy.md", []byte(src))
		switch {
		case invalid && err == nil:
			t.Errorf("example %d is marked invalid but parses:\n%s", i+1, src)
		case !invalid && err != nil:
			t.Errorf("example %d:\n%s\nerror:\n%v", i+1, src, err)
		case err == nil:
			if got := len(p.Warnings()) > 0; got != warns {
				t.Errorf("example %d: warnings %v (a block that warns starts with \"# warns\"):\n%s", i+1, p.Warnings(), src)
			}
			for _, r := range p.RunTests() {
				if !r.Pass {
					t.Errorf("example %d: test %q: %v", i+1, r.Case.Line, r.Problems)
				}
			}
		}
	}
}
