//go:build !airlock_thin

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeCheckReportsEverything: `serve --check` on the review's config
// prints all three errors in one run, the typo with its fix, and accepts
// "7d" (users.md S12), then passes on the shipped example.
func TestServeCheckReportsEverything(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "badcfg.toml")
	src := `version = 1
[network]
pool = "198.18.64.0/24"
gateway = "198.18.64.1"
[upstream]
resolvers = ["198.18.0.53"]
[audit]
retension = "7d"
[sandbox]
exec_timeout = "10 minutes"
lifetime = "7d"
`
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errs, code := runCLI(t, "serve", "--check", "--config", cfg)
	want := cfg + `:8:1: unknown key "audit.retension" (did you mean "audit.retention"?)` + "\n" +
		cfg + `:10:17: sandbox.exec_timeout: not a duration (use e.g. "30s", "5m", "1h", "7d"): "10 minutes"` + "\n"
	if code != 1 || errs != want {
		t.Errorf("exit %d, want 1\ngot\n%swant\n%s", code, errs, want)
	}
	out, errs, code := runCLI(t, "serve", "--check", "--config", "../../serve/examples/lab.toml")
	if code != 0 || !strings.HasSuffix(out, ": ok\n") {
		t.Errorf("lab.toml: exit %d\n%s%s", code, out, errs)
	}
}
