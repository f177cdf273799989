package policies

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestRecipes loads every ```toml block of docs/recipes.md as a complete
// policy: it must pass the --strict checks (no warnings), carry tests, and
// pass them; and every host it names must be a .test stand-in (the
// repository never names real public hosts).
func TestRecipes(t *testing.T) {
	data, err := os.ReadFile("../docs/recipes.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := tomlBlock.FindAllStringSubmatch(string(data), -1)
	if len(blocks) < 7 {
		t.Fatalf("docs/recipes.md has %d toml recipes, want at least 7", len(blocks))
	}
	url := regexp.MustCompile(`https?://([^/"\s]+)`)
	hostList := regexp.MustCompile(`(?m)^hosts = \[(.*)\]`)
	for i, b := range blocks {
		src := b[1]
		p, err := Parse("recipes.md", []byte(src))
		if err != nil {
			t.Errorf("recipe %d does not load:\n%s\nerror:\n%v", i+1, src, err)
			continue
		}
		if w := p.Warnings(); len(w) > 0 {
			t.Errorf("recipe %d warns (check --strict would fail): %v", i+1, w)
		}
		res := p.RunTests()
		if len(res) == 0 {
			t.Errorf("recipe %d has no [[tests]]", i+1)
		}
		for _, r := range res {
			if !r.Pass {
				t.Errorf("recipe %d: test %q: %v", i+1, r.Case.Line, r.Problems)
			}
		}
		var hosts []string
		for _, m := range url.FindAllStringSubmatch(src, -1) {
			hosts = append(hosts, m[1])
		}
		for _, m := range hostList.FindAllStringSubmatch(src, -1) {
			for _, h := range strings.Split(m[1], ",") {
				hosts = append(hosts, strings.Trim(strings.TrimSpace(h), `"`))
			}
		}
		for _, h := range hosts {
			if !strings.HasSuffix(h, ".test") {
				t.Errorf("recipe %d names %q, not a .test stand-in", i+1, h)
			}
		}
	}
}
