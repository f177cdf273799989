package policies

import (
	"strings"
	"testing"
)

// TestLockfileTOMLNestingBounded: a uv.lock or poetry.lock nesting arrays
// or inline tables past maxTOMLNesting is refused at its position before
// the decoder sees it (two million '[' overflowed the decoder's stack, a
// fatal error that took the appliance down); brackets inside strings and
// comments do not count, and real nesting passes.
func TestLockfileTOMLNestingBounded(t *testing.T) {
	for _, name := range []string{"uv.lock", "poetry.lock"} {
		deep := "version = 1\nx = " + strings.Repeat("[", 2_000_000) + strings.Repeat("]", 2_000_000) + "\n"
		_, err := ParseLockfiles([]Lockfile{{Name: name, Data: []byte(deep)}}, Rule{Name: "sandbox.lockfiles"})
		if err == nil || !strings.Contains(err.Error(), "nest more than 128 deep") || !strings.Contains(err.Error(), name+":2:") {
			t.Errorf("%s nested 2,000,000 deep: %v", name, err)
		}
		tables := "version = 1\nx = " + strings.Repeat("{a = ", 200) + "1" + strings.Repeat("}", 200) + "\n"
		if _, err := ParseLockfiles([]Lockfile{{Name: name, Data: []byte(tables)}}, Rule{Name: "sandbox.lockfiles"}); err == nil || !strings.Contains(err.Error(), "nest more than") {
			t.Errorf("%s with inline tables 200 deep: %v", name, err)
		}
	}
	quoted := "version = 1\n# " + strings.Repeat("[", 500) + "\nnote = \"" + strings.Repeat("[", 500) + "\"\nlit = '''" + strings.Repeat("{", 500) + "'''\n" +
		"[[package]]\nname = \"a\"\nversion = \"1.0\"\nsource = { registry = \"https://pypi.example.test/simple\" }\n" +
		"wheels = [{ url = \"https://files.example.test/a-1.0-py3-none-any.whl\", hash = \"sha256:" + strings.Repeat("ab", 32) + "\" }]\n"
	if err := tomlNesting("uv.lock", []byte(quoted)); err != nil {
		t.Errorf("brackets in comments and strings counted: %v", err)
	}
}

// TestLockfileErrorsKeepTokens: a lockfile's error (which reaches the
// appliance's log when a kept lockfile no longer reads) never quotes a
// URL's credentials, and a lockfile name with a terminal control (C1
// included) is refused: names are printed by `airlock sandbox show`.
func TestLockfileErrorsKeepTokens(t *testing.T) {
	for _, line := range []string{"--find-links=https://user:s3cr3t-tok@files.example.test/simple\n",
		"pkg@https://user:s3cr3t-tok@files.example.test/pkg-1.0.whl\n"} {
		_, err := ParseLockfiles([]Lockfile{{Name: "requirements.txt", Data: []byte(line)}}, Rule{Name: "sandbox.lockfiles"})
		if err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%q: %v", line, err)
		}
	}
	for _, name := range []string{"req\u009b2Jirements.txt", "a\x1b[2Jb.txt", "bad\xffname.txt"} {
		if _, err := ParseLockfiles([]Lockfile{{Name: name, Data: []byte("a==1 --hash=sha256:" + strings.Repeat("ab", 32) + "\n")}}, Rule{Name: "sandbox.lockfiles"}); err == nil {
			t.Errorf("lockfile name %q accepted", name)
		}
	}
}
