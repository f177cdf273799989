//go:build !airlock_thin

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runPolicy(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runCLI(t, append([]string{"policy"}, args...)...)
}

func examples(t *testing.T) []string {
	files, err := filepath.Glob("../../policies/examples/*.toml")
	if err != nil || len(files) < 4 {
		t.Fatalf("examples: %v %v", files, err)
	}
	return files
}

func TestPolicyCheckExamples(t *testing.T) {
	out, errs, code := runPolicy(t, append([]string{"check", "--strict"}, examples(t)...)...)
	if code != 0 || errs != "" {
		t.Fatalf("check: exit %d\n%s%s", code, out, errs)
	}
}

func TestPolicyCheckFiveMistakes(t *testing.T) {
	_, errs, code := runPolicy(t, "check", "../../policies/testdata/five-mistakes.toml")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	if len(lines) != 5 {
		t.Fatalf("want 5 errors, got %d:\n%s", len(lines), errs)
	}
	for _, l := range lines {
		// file:line:col: message
		parts := strings.SplitN(l, ":", 4)
		if len(parts) < 4 || parts[0] != "../../policies/testdata/five-mistakes.toml" || parts[1] == "" || parts[2] == "" {
			t.Errorf("not file:line:col: message: %q", l)
		}
	}
}

func TestPolicyTestExamples(t *testing.T) {
	out, errs, code := runPolicy(t, append([]string{"test"}, examples(t)...)...)
	if code != 0 {
		t.Fatalf("test: exit %d\n%s%s", code, out, errs)
	}
	if n := strings.Count(out, "tests passed"); n != len(examples(t)) {
		t.Errorf("output:\n%s", out)
	}
}

func TestPolicyTestFailureShowsExpectedAndActual(t *testing.T) {
	f := filepath.Join(t.TempDir(), "p.toml")
	src := `version = 1
[categories.git]
hosts = ["git.example.test"]

[[tests]]
name = "push is allowed (wrong on purpose)"
request = "POST https://git.example.test/acme/app.git/git-receive-pack"
expect = "allow"
`
	if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs, code := runPolicy(t, "test", f)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{f + ":5:1: FAIL push is allowed", "expected: allow", "actual:   deny by categories.git.push (" + f + ":2:1)", "want allow, got deny"} {
		if !strings.Contains(errs, want) {
			t.Errorf("output lacks %q:\n%s", want, errs)
		}
	}
}

func TestPolicyExplain(t *testing.T) {
	file := "../../policies/examples/coding-agent.toml"
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"GET https://git.example.test/acme/app.git/info/refs?service=git-receive-pack"},
			[]string{"verdict:   deny\n", "rule:      categories.git.push (" + file + ":25:1)", "categories.git.hosts[0] (" + file + ":24:10): the most specific rule that matches", "categories.registries (" + file + ":18:1): no host pattern matches git.example.test"}},
		{[]string{"https://git.example.test/acme/app.git/info/refs?service=git-receive-pack"},
			[]string{"verdict:   deny\n", "rule:      categories.git.push (" + file + ":25:1)"}},
		{[]string{"dns", "registry.example.test", "TXT"},
			[]string{"verdict:   deny", "rule:      dns.qtypes"}},
		{[]string{"connect", "a.docs.example.test:443"},
			[]string{"verdict:   audit", "category:  public_web (public_web)", "categories.public_web.hosts[1]"}},
	}
	for _, tc := range cases {
		out, errs, code := runPolicy(t, append([]string{"explain", file}, tc.args...)...)
		if code != 0 {
			t.Errorf("%v: exit %d: %s", tc.args, code, errs)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
	if _, _, code := runPolicy(t, "explain", file, "FETCH something"); code != 2 {
		t.Errorf("bad request line: exit %d, want 2", code)
	}
}

// TestPolicyCheckStrict: a policy that loads but warns passes check with
// its warnings printed, and fails check --strict with exit code 1.
func TestPolicyCheckStrict(t *testing.T) {
	f := filepath.Join(t.TempDir(), "broad.toml")
	src := `version = 1
[categories.public_web]
hosts = ["*.co.uk"]
`
	if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	warn := f + `:3:10: warning: categories.public_web.hosts[0]: "*.co.uk" matches every name under the public suffix "co.uk", names anyone can register: list the names the category needs` + "\n"
	out, errs, code := runPolicy(t, "check", f)
	if code != 0 || errs != warn || !strings.HasPrefix(out, f+": ok with 1 warning (1 category, 0 tests, sha256 ") {
		t.Errorf("check: exit %d\nstdout %q\nstderr %q", code, out, errs)
	}
	out, errs, code = runPolicy(t, "check", "--strict", f)
	if code != 1 || out != "" || errs != warn+f+": 1 warning (--strict)\n" {
		t.Errorf("check --strict: exit %d, want 1\nstdout %q\nstderr %q", code, out, errs)
	}
	out, errs, code = runPolicy(t, append([]string{"check", "--strict"}, examples(t)...)...)
	if code != 0 || errs != "" {
		t.Errorf("check --strict on the examples: exit %d\n%s%s", code, out, errs)
	}
}

// TestPolicyTestSaysTheRuleDoesNotExist: a failing test whose rule name
// does not exist says so, with the closest name (users.md S7).
func TestPolicyTestSaysTheRuleDoesNotExist(t *testing.T) {
	f := filepath.Join(t.TempDir(), "p.toml")
	src := `version = 1
[categories.git]
hosts = ["git.example.test"]

[[tests]]
request = "GET https://git.example.test/a/b.git/info/refs"
expect = "allow"
rule = "categories.git.host[0]"
`
	if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs, code := runPolicy(t, "test", f)
	want := `    no rule is named "categories.git.host[0]" (did you mean "categories.git.hosts[0]"?): the test can never pass` + "\n"
	if code != 1 || !strings.HasSuffix(errs, want) {
		t.Errorf("exit %d, want 1; stderr lacks %q:\n%s", code, want, errs)
	}
}
