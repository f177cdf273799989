//go:build !airlock_thin

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/serve"
)

// TestPrincipalCommands: add prints a token once and stores only its
// hash (the token then authenticates as the principal), ls lists without
// tokens, rm revokes and keeps the file's comments.
func TestPrincipalCommands(t *testing.T) {
	file := filepath.Join(t.TempDir(), "principals.toml")
	if err := os.WriteFile(file, []byte("# keep me\nversion = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, "principal", "add", "ci", "--file", file, "--no-reload",
		"--scope", "sandbox:create,sandbox:exec", "--scope", "logs:read", "--sandboxes", "5", "--max-lifetime", "2h", "--policy", "coding-agent")
	if code != 0 {
		t.Fatalf("add: exit %d: %s", code, errOut)
	}
	token := strings.TrimSpace(out)
	if !strings.HasPrefix(token, "alk_") || !strings.Contains(errOut, "not shown again") {
		t.Fatalf("add printed %q / %q", out, errOut)
	}
	src, _ := os.ReadFile(file)
	if strings.Contains(string(src), token) || !strings.Contains(string(src), serve.TokenHash(token)) {
		t.Fatalf("the file holds the token or not its hash:\n%s", src)
	}
	ps, err := serve.LoadPrincipals(file)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := ps.Lookup(token)
	if !ok || p.Name != "ci" || p.Quota.Sandboxes != 5 || p.Quota.MaxLifetime.Hours() != 2 || !p.Has("logs:read") || p.Has("admin") {
		t.Fatalf("looked up %+v, %t", p, ok)
	}
	if _, e, code := runCLI(t, "principal", "add", "ci", "--file", file, "--no-reload", "--scope", "files"); code != 1 || !strings.Contains(e, "already") {
		t.Errorf("second add of ci: exit %d: %s", code, e)
	}
	if _, e, code := runCLI(t, "principal", "add", "bad", "--file", file, "--no-reload", "--scope", "root"); code != 1 || !strings.Contains(e, `unknown scope "root"`) {
		t.Errorf("unknown scope: exit %d: %s", code, e)
	}
	if _, _, code := runCLI(t, "principal", "add", "x", "--file", file, "--no-reload"); code != 2 {
		t.Errorf("add without --scope: exit %d, want 2", code)
	}
	ls, _, _ := runCLI(t, "principal", "ls", "--file", file)
	if !strings.Contains(ls, "ci") || !strings.Contains(ls, "sandboxes=5") || strings.Contains(ls, token) {
		t.Errorf("ls:\n%s", ls)
	}
	if _, e, code := runCLI(t, "principal", "rm", "ci", "--file", file, "--no-reload"); code != 0 {
		t.Fatalf("rm: exit %d: %s", code, e)
	}
	src, _ = os.ReadFile(file)
	if strings.Contains(string(src), "principals.ci") || !strings.Contains(string(src), "# keep me") {
		t.Errorf("after rm:\n%s", src)
	}
	if st, _ := os.Stat(file); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if ps, err := serve.LoadPrincipals(file); err != nil {
		t.Fatal(err)
	} else if _, ok := ps.Lookup(token); ok {
		t.Error("the removed principal's token still authenticates")
	}
}
