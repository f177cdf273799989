package proxy

import (
	"strings"
	"testing"

	"airlock/e2e/world/pkgreg"
)

func TestRefusalPhrase(t *testing.T) {
	long := strings.Repeat("x", 500)
	cases := []struct {
		name, reason, want string
	}{
		{"no reason", "", ""},
		{"reason", "package_too_new: a@2.0.0 was published 2026-12-01T00:00:00Z", "Forbidden (airlock: package_too_new: a@2.0.0 was published 2026-12-01T00:00:00Z)"},
		{"control bytes and non-ASCII", "a\r\nb\u00e9", "Forbidden (airlock: a??b?)"},
		{"long reason cut", long, "Forbidden (airlock: " + long[:maxPhrase-4-len("Forbidden (airlock: ")] + "...)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := refusalPhrase(403, c.reason)
			if got != c.want || len(got) > maxPhrase {
				t.Errorf("refusalPhrase(403, %q) = %q (%d bytes), want %q", c.reason, got, len(got), c.want)
			}
		})
	}
}

// TestRefusalStatusLine: a refused download's status line says why
// (clients print it where they print no body); an allowed one's is the
// standard text.
func TestRefusalStatusLine(t *testing.T) {
	g := newGateEnv(t)
	resp, _ := g.get(t, g.regURL("registry.example.test", pkgreg.NPMTarballPath("gate-demo", "2.0.0")), "")
	if want := "403 Forbidden (airlock: package_too_new: gate-demo@2.0.0 was published "; !strings.HasPrefix(resp.Status, want) || !strings.HasSuffix(resp.Status, ")") {
		t.Errorf("status line %q, want %q…)", resp.Status, want)
	}
	if resp, _ := g.get(t, g.regURL("registry.example.test", pkgreg.NPMTarballPath("gate-demo", "1.1.0")), ""); resp.Status != "200 OK" {
		t.Errorf("allowed download: status line %q", resp.Status)
	}
}
