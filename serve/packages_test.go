package serve

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/client"
	"airlock/policies"
)

const malAdvisory = `{"id": "MAL-2026-0009", "summary": "Malicious code in left-pad-evil",
 "affected": [{"package": {"ecosystem": "npm", "name": "left-pad-evil"}, "versions": ["1.0.0"]}]}`

// TestAdvisoriesReload: [packages] osv loads at start and on reload; a
// list that no longer parses is rejected and the running one stays.
func TestAdvisoriesReload(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("MAL-2026-0009.json", malAdvisory)
	a := &Appliance{log: slog.New(slog.DiscardHandler), advisory: &advisories{dirs: []string{dir}, log: slog.New(slog.DiscardHandler)}}
	if err := a.advisory.load(); err != nil {
		t.Fatal(err)
	}
	evil := policies.Package{Ecosystem: "npm", Name: "left-pad-evil", Version: "1.0.0"}
	if _, ok := a.advisory.Advisories().Match(evil); !ok {
		t.Fatal("the advisory did not load")
	}
	write("MAL-2026-0010.json", strings.Replace(malAdvisory, "0009", "0010", 1)+"\n}")
	var res client.ReloadResult
	a.reloadAdvisories(&res)
	if len(res.Rejected) != 1 || res.Rejected[0].Name != "packages.osv" || !strings.Contains(strings.Join(res.Rejected[0].Errors, " "), "MAL-2026-0010.json:3:") {
		t.Errorf("reload result %+v", res)
	}
	if _, ok := a.advisory.Advisories().Match(evil); !ok {
		t.Error("a broken reload dropped the running list")
	}
	write("MAL-2026-0010.json", strings.Replace(strings.Replace(malAdvisory, "0009", "0010", 1), "left-pad-evil", "other-evil", -1))
	res = client.ReloadResult{}
	a.reloadAdvisories(&res)
	if _, ok := a.advisory.Advisories().Match(policies.Package{Ecosystem: "npm", Name: "other-evil", Version: "1.0.0"}); !ok || len(res.Rejected) != 0 {
		t.Errorf("the fixed list did not load: %+v", res)
	}
}
