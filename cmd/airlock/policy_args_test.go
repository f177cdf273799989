//go:build !airlock_thin

package main

import (
	"os"
	"strings"
	"testing"
)

// TestPolicyCheckDirAndStdin: check and test take a directory (its *.toml,
// as serve reads policy_dir) and "-" for standard input (users.md S10:
// "read …/examples/: is a directory", and "-" was opened as a file).
func TestPolicyCheckDirAndStdin(t *testing.T) {
	out, errs, code := runCLI(t, "policy", "check", "--strict", "../../policies/examples/")
	if code != 0 || strings.Count(out, ": ok (") != len(examples(t)) {
		t.Errorf("check DIR: exit %d\n%s%s", code, out, errs)
	}
	out, errs, code = runCLI(t, "policy", "test", "../../policies/examples")
	if code != 0 || strings.Count(out, "tests passed") != len(examples(t)) {
		t.Errorf("test DIR: exit %d\n%s%s", code, out, errs)
	}
	if _, errs, code = runCLI(t, "policy", "check", t.TempDir()); code != 1 || !strings.Contains(errs, "no *.toml policy files") {
		t.Errorf("check on an empty directory: exit %d, %q", code, errs)
	}

	src, err := os.Open("../../policies/examples/coding-agent.toml")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	rootCmd.SetIn(src)
	defer rootCmd.SetIn(nil)
	out, errs, code = runCLI(t, "policy", "test", "-")
	if code != 0 || out != "-: 13/13 tests passed\n" {
		t.Errorf("test -: exit %d\n%s%s", code, out, errs)
	}
	rootCmd.SetIn(strings.NewReader("version = 1\n[categories.git\n"))
	_, errs, code = runCLI(t, "policy", "check", "-")
	if code != 1 || !strings.HasPrefix(errs, "<stdin>:2:16: TOML syntax") {
		t.Errorf("check - on a broken policy: exit %d, %q", code, errs)
	}
	if _, _, code = runCLI(t, "policy", "check", "-", "-"); code != 2 {
		t.Errorf("check - -: exit %d, want 2", code)
	}
}
