//go:build !airlock_thin

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
)

// asAirlockd makes this test binary stand in for bin/airlockd (the full
// build) when the thin build execs it: TestThinBuild links it beside a
// thin binary it builds.
const asAirlockd = "AIRLOCK_TEST_AS_AIRLOCKD"

func TestMain(m *testing.M) {
	if os.Getenv(asAirlockd) == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// buildThin builds cmd/airlock with -tags airlock_thin (as make build
// does for bin/airlock-cli) into a directory where airlockd is this test
// binary, and returns the thin binary's path.
func buildThin(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to build the thin CLI: %v", err)
	}
	dir := t.TempDir()
	thin := filepath.Join(dir, "airlock")
	build := exec.Command(goBin, "build", "-tags", "airlock_thin", "-o", thin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags airlock_thin: %v\n%s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(dir, applianceBinary)); err != nil {
		t.Fatal(err)
	}
	return thin
}

// runThin runs the thin binary with args, this test binary as airlockd.
func runThin(t *testing.T, thin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(thin, args...)
	cmd.Env = append(os.Environ(), asAirlockd+"=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s %s: %v", thin, strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}

// sameRun reports how the thin build's run of args differs from the full
// build's.
func sameRun(t *testing.T, args []string, gotOut, gotErr string, gotCode int, wantOut, wantErr string, wantCode int) {
	t.Helper()
	if gotCode != wantCode {
		t.Errorf("airlock %q: the thin build exits %d, the full build %d", args, gotCode, wantCode)
	}
	if d := cmp.Diff(wantOut, gotOut); d != "" {
		t.Errorf("airlock %q: stdout of the thin build differs (-full +thin):\n%s", args, d)
	}
	if d := cmp.Diff(wantErr, gotErr); d != "" {
		t.Errorf("airlock %q: stderr of the thin build differs (-full +thin):\n%s", args, d)
	}
}

// TestThinBuild: bin/airlock-cli (the thin build) has every command of the
// full build: `--help` of each prints what the full build prints (its own
// for the client commands, airlockd's for the commands it hands over),
// and a delegated command keeps its exit status, its errors and its
// completions. Without airlockd beside it, a delegated command says where
// it looked.
func TestThinBuild(t *testing.T) {
	thin := buildThin(t)
	markUsageErrors(rootCmd)
	n := 0
	walkCommands(rootCmd, func(c *cobra.Command) {
		path := strings.Fields(c.CommandPath())[1:]
		args := append(path, "--help")
		wantOut, wantErr, wantCode := runCLI(t, args...)
		gotOut, gotErr, gotCode := runThin(t, thin, args...)
		sameRun(t, args, gotOut, gotErr, gotCode, wantOut, wantErr, wantCode)
		n++
	})
	if n < 40 {
		t.Fatalf("walked %d commands: the tree checked is not the CLI's", n)
	}

	good := "../../policies/examples/coding-agent.toml"
	for _, args := range [][]string{
		{"nope"},
		{"help", "serve"},
		{"help", "sandbox", "replay"},
		{"policy", "chek", good},
		{"policy", "check", good},
		{"policy", "check", "--strict", "no-such.toml"},
		{"sandbox", "replay"},
		{"logs", "--kind", "dnss"},
		{"sandbox", "exec"},
		{cobra.ShellCompRequestCmd, "policy", ""},
		{cobra.ShellCompRequestCmd, "logs", "--ki"},
		{cobra.ShellCompRequestCmd, "sandbox", ""},
	} {
		wantOut, wantErr, wantCode := runCLI(t, args...)
		gotOut, gotErr, gotCode := runThin(t, thin, args...)
		sameRun(t, args, gotOut, gotErr, gotCode, wantOut, wantErr, wantCode)
	}

	if err := os.Remove(filepath.Join(filepath.Dir(thin), applianceBinary)); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runThin(t, thin, "serve", "--check")
	want := filepath.Join(filepath.Dir(thin), applianceBinary) + ": no such file or directory (make build puts it beside " + thin + ")"
	if code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("airlock serve without airlockd: exit %d, stderr %q; want 1 and %q", code, stderr, want)
	}
}
