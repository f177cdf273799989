//go:build !airlock_thin

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// runCLI runs the real command line and returns its output and exit
// status; every flag is reset afterwards (cobra keeps values between runs).
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&errb)
	defer func() { rootCmd.SetOut(nil); rootCmd.SetErr(nil); resetFlags(rootCmd) }()
	code = run(args)
	return out.String(), errb.String(), code
}

func resetFlags(root *cobra.Command) {
	walkCommands(root, func(c *cobra.Command) {
		reset := func(f *pflag.Flag) {
			if sv, ok := f.Value.(pflag.SliceValue); ok {
				_ = sv.Replace(nil)
			} else {
				_ = f.Value.Set(f.DefValue)
			}
			f.Changed = false
		}
		c.Flags().VisitAll(reset)
		c.PersistentFlags().VisitAll(reset)
	})
}

// TestExitCodes: a usage error exits 2 with a pointer to --help; a command
// that ran and failed exits 1 (users.md S10: `policy check` without a file
// exited 1, like a policy that does not load).
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("version = 1\nmodes = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := "../../policies/examples/coding-agent.toml"
	cases := []struct {
		args []string
		code int
		hint string // in stderr for a usage error
	}{
		{[]string{"nope"}, 2, "Run 'airlock --help' for usage."},
		{[]string{"policy", "chek", good}, 2, `unknown command "chek" for "airlock policy" (did you mean "check"?)`},
		{[]string{"policy", "check"}, 2, "Run 'airlock policy check --help' for usage."},
		{[]string{"policy", "test", "--bogus", good}, 2, "unknown flag: --bogus"},
		{[]string{"policy", "explain", good}, 2, "requires at least 2 arg(s)"},
		{[]string{"policy", "explain", good, "FETCH x"}, 2, ""},
		{[]string{"policy", "test", "-o", "yaml", good}, 2, `-o "yaml"`},
		{[]string{"policy", "test", "--run", "(", good}, 2, "--run"},
		{[]string{"policy", "check", bad}, 1, ""},
		{[]string{"policy", "check", good}, 0, ""},
		{[]string{"version", "extra"}, 2, `unknown command "extra" for "airlock version"`},
		{[]string{"logs", "--no-such-flag"}, 2, "unknown flag"},
		{[]string{"logs", "--kind", "dnss"}, 2, `--kind "dnss"`},
		{[]string{"logs", "--verdict", "maybe"}, 2, `--verdict "maybe"`},
		{[]string{"logs", "--since", "yesterday-ish"}, 2, "--since"},
		{[]string{"logs", "-o", "yaml"}, 2, `-o "yaml"`},
		{[]string{"report", "--md", "--html", "x.html", "sb"}, 2, "--md and --html exclude each other"},
		{[]string{"ca", "export", "--state-dir", filepath.Join(dir, "typo")}, 1, ""},
		{[]string{"ca", "export", "extra"}, 2, ""},
		{[]string{"serve", "--check", "--config", bad}, 1, ""},
		{[]string{"--version"}, 0, ""},
		{[]string{"completion", "tcsh"}, 2, `unknown command "tcsh" for "airlock completion"`},
		{[]string{"completion", "bash"}, 0, ""},
		{[]string{"help", "policy"}, 0, ""},
	}
	for _, tc := range cases {
		_, errs, code := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.hint) {
			t.Errorf("airlock %s: exit %d, want %d; stderr %q (want it to contain %q)", strings.Join(tc.args, " "), code, tc.code, errs, tc.hint)
		}
	}
}
