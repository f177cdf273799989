package serve

import (
	"strings"
	"testing"
)

func TestParsePrincipalsErrors(t *testing.T) {
	hash := TokenHash("alk_x")
	for _, tc := range []struct {
		name, src, want string
	}{
		{"no version", "[principals.a]\ntoken_sha256 = \"" + hash + "\"\nscopes = [\"admin\"]\n", "p.toml: version = 1 is required (got 0)"},
		{"unknown key", "version = 1\n[principals.a]\ntoken_sha256 = \"" + hash + "\"\nscopes = [\"admin\"]\ntoken = \"x\"\n", `p.toml:5:1: unknown key "principals.a.token"`},
		{"unknown quota key", "version = 1\n[principals.a]\ntoken_sha256 = \"" + hash + "\"\nscopes = [\"admin\"]\n[principals.a.quota]\nsandbox = 1\n", `p.toml:6:1: unknown key "principals.a.quota.sandbox"`},
		{"bad hash", "version = 1\n[principals.a]\ntoken_sha256 = \"abc\"\nscopes = [\"admin\"]\n", "p.toml:3:1: principals.a: token_sha256 must be 64 hex digits"},
		{"unknown scope", "version = 1\n[principals.a]\ntoken_sha256 = \"" + hash + "\"\nscopes = [\"sandbox:delete\"]\n", `p.toml:4:1: principals.a: scopes[0]: unknown scope "sandbox:delete"`},
		{"no scopes", "version = 1\n[principals.a]\ntoken_sha256 = \"" + hash + "\"\n", "p.toml:2:1: principals.a: scopes is required"},
		{"reserved", "version = 1\n[principals.local]\ntoken_sha256 = \"" + hash + "\"\nscopes = [\"admin\"]\n", `p.toml:2:1: principals.local: the name "local" is reserved`},
		{"bad name", "version = 1\n[principals.\"A B\"]\ntoken_sha256 = \"" + hash + "\"\nscopes = [\"admin\"]\n", "principals.A B: a name is 1-64 of"},
		{"shared token", "version = 1\n[principals.a]\ntoken_sha256 = \"" + hash + "\"\nscopes = [\"admin\"]\n[principals.b]\ntoken_sha256 = \"" + hash + "\"\nscopes = [\"admin\"]\n",
			"p.toml:6:1: principals.b: token_sha256 is the same as principals.a's"},
		{"bad duration", "version = 1\n[principals.a]\ntoken_sha256 = \"" + hash + "\"\nscopes = [\"admin\"]\n[principals.a.quota]\nmax_lifetime = \"soon\"\n", "not a duration"},
		{"negative quota", "version = 1\n[principals.a]\ntoken_sha256 = \"" + hash + "\"\nscopes = [\"admin\"]\n[principals.a.quota]\nsandboxes = -1\n", "p.toml:6:1: principals.a: quota.sandboxes must not be negative"},
		{"syntax", "version = 1\n[principals.a\n", "p.toml:3:"},
		{"key in another case", "version = 1\n[principals.a]\ntoken_sha256 = \"" + hash + "\"\nScopes = [\"admin\"]\n",
			`p.toml:4:1: unknown key "principals.a.Scopes" (did you mean "principals.a.scopes"?)`},
	} {
		_, err := parsePrincipals("p.toml", []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	ps, err := parsePrincipals("p.toml", []byte("version = 1\n[principals.a]\ntoken_sha256 = \""+strings.ToUpper(hash)+"\"\nscopes = [\"files\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := ps.Lookup("alk_x"); !ok || p.Name != "a" || !p.Has(ScopeFiles) || p.Has(ScopeExec) {
		t.Errorf("lookup: %+v %t", p, ok)
	}
	if _, ok := ps.Lookup(""); ok {
		t.Error("the empty token matched")
	}
}

// TestPrincipalsEveryErrorAtOnce: values of the wrong type are each
// reported at their place, and not again as missing.
func TestPrincipalsEveryErrorAtOnce(t *testing.T) {
	src := "version = 1\n[principals.a]\ntoken_sha256 = 5\nscopes = \"admin\"\n[principals.b]\nscopes = [\"admin\"]\nquota = { sandboxes = \"two\" }\n"
	_, err := parsePrincipals("p.toml", []byte(src))
	if err == nil {
		t.Fatal("accepted")
	}
	got := err.Error()
	for _, want := range []string{"p.toml:3:1: principals.a.token_sha256: incompatible types", "p.toml:4:1: principals.a.scopes: incompatible types",
		"p.toml:5:1: principals.b: token_sha256 must be 64 hex digits", "p.toml:7:11: principals.b.quota.sandboxes: incompatible types"} {
		if !strings.Contains(got, want) {
			t.Errorf("errors:\n%s\nwant a line with %q", got, want)
		}
	}
	if n := strings.Count(got, "\n") + 1; n != 4 {
		t.Errorf("%d errors, want 4:\n%s", n, got)
	}
}

// FuzzParsePrincipals: any input is an error or a valid set, never a
// panic; a valid set never admits the empty token.
func FuzzParsePrincipals(f *testing.F) {
	f.Add([]byte("version = 1\n[principals.a]\ntoken_sha256 = \"" + TokenHash("t") + "\"\nscopes = [\"admin\"]\n[principals.a.quota]\nsandboxes = 2\nmax_lifetime = \"1h\"\n"))
	f.Add([]byte("version = 1\n[principals]\n"))
	f.Add([]byte("[[principals]]\nx=1"))
	f.Fuzz(func(t *testing.T, src []byte) {
		ps, err := parsePrincipals("f.toml", src)
		if err != nil {
			return
		}
		if _, ok := ps.Lookup(""); ok {
			t.Fatal("the empty token matched")
		}
		for _, n := range ps.Names() {
			if !principalName.MatchString(n) || n == LocalPrincipal || n == TokenPrincipal {
				t.Fatalf("accepted name %q", n)
			}
		}
	})
}
