package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestFrontExec: bin/airlock runs `airlock sandbox exec` itself
// (cmd/airlock-front, internal/clifront) against a real appliance and
// sandbox, and each command line gives what the CLI (airlock-cli) gives:
// the same stdout and stderr bytes and the same exit status. The fast-path
// lines also run from a directory where the front has no CLI beside it, so
// they cannot have been handed to the CLI; the lines it leaves to the CLI
// fail there, naming the CLI it could not run.
func TestFrontExec(t *testing.T) {
	requireAppliance(t)
	bin := airlockBinary(t)
	cli := filepath.Join(filepath.Dir(bin), "airlock-cli")
	lonely := filepath.Join(t.TempDir(), "airlock")
	if b, err := os.ReadFile(bin); err != nil || os.WriteFile(lonely, b, 0o755) != nil {
		t.Fatalf("copy the front: %v", err)
	}
	w := startWorld(t)
	a := startAgentAppliance(t, w, "front", func(cfg string) string { return cfg })
	s := a.newSandbox(t, false)

	type result struct {
		stdout, stderr []byte
		code           int
	}
	run := func(binary string, stdin []byte, args ...string) result {
		t.Helper()
		cmd := exec.Command(binary, args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "AIRLOCK_SOCKET=" + a.socket}
		cmd.Stdin = bytes.NewReader(stdin)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s %q: %v", binary, args, err)
		}
		return result{o.Bytes(), e.Bytes(), code}
	}
	// A timeout's message names how long the command ran.
	ms := regexp.MustCompile(`after [0-9.]+m?s`)
	norm := func(b []byte) string { return ms.ReplaceAllString(string(b), "after T") }
	same := func(args []string, got, want result) {
		t.Helper()
		if !bytes.Equal(got.stdout, want.stdout) || norm(got.stderr) != norm(want.stderr) || got.code != want.code {
			t.Errorf("%q:\n front: exit %d stdout %q stderr %q\n   cli: exit %d stdout %q stderr %q",
				args, got.code, got.stdout, got.stderr, want.code, want.stdout, want.stderr)
		}
	}

	for _, c := range []struct {
		args           []string
		stdin          []byte
		stdout, stderr string // what the command must give (stderr: contained)
		code           int
	}{
		{args: []string{"--", "echo", "hi"}, stdout: "hi\n"},
		{args: []string{"--cwd", "/tmp", "--", "pwd"}, stdout: "/tmp\n"},
		{args: []string{"--cwd=/tmp", "-e", "A=1", "--env=B=two words", "--", "sh", "-c", `echo "$A $B $PWD"`}, stdout: "1 two words /tmp\n"},
		{args: []string{"-u", "65534", "--", "id", "-u"}, stdout: "65534\n"},
		{args: []string{"--user=65534:65534", "--", "id", "-g"}, stdout: "65534\n"},
		{args: []string{"--", "sh", "-c", "echo out; echo err >&2; exit 3"}, stdout: "out\n", stderr: "err\n", code: 3},
		{args: []string{"-i", "--", "cat"}, stdin: []byte("in\x00\xff\xfe\n"), stdout: "in\x00\xff\xfe\n"},
		{args: []string{"--", "sh", "-c", `printf '\377\000\200x'`}, stdout: "\xff\x00\x80x"},
		{args: []string{"--timeout", "300ms", "--", "sleep", "5"}, stderr: "timed out after", code: 124},
		{args: []string{"--", "sh", "-c", "kill -9 $$"}, code: 137},
	} {
		args := append([]string{"sandbox", "exec", s.id}, c.args...)
		got, want := run(bin, c.stdin, args...), run(cli, c.stdin, args...)
		same(args, got, want)
		alone := run(lonely, c.stdin, args...)
		same(args, alone, want)
		if string(alone.stdout) != c.stdout || !strings.Contains(string(alone.stderr), c.stderr) || alone.code != c.code {
			t.Errorf("%q without the CLI beside it: exit %d stdout %q stderr %q; want exit %d stdout %q stderr containing %q",
				args, alone.code, alone.stdout, alone.stderr, c.code, c.stdout, c.stderr)
		}
	}

	// A background command prints its exec id (each run its own).
	id := regexp.MustCompile(`^[0-9a-f]{12}\n$`)
	for _, b := range []string{bin, cli, lonely} {
		if r := run(b, nil, "sandbox", "exec", "--background", s.id, "--", "sleep", "1"); r.code != 0 || !id.Match(r.stdout) || len(r.stderr) != 0 {
			t.Errorf("%s --background: exit %d stdout %q stderr %q, want an exec id", b, r.code, r.stdout, r.stderr)
		}
	}

	// An unknown sandbox is the appliance's error, printed as the CLI does.
	args := []string{"sandbox", "exec", "0123456789ab", "--", "true"}
	want := run(cli, nil, args...)
	if want.code != 1 || !strings.Contains(string(want.stderr), "not_found") {
		t.Errorf("cli %q: exit %d stderr %q, want not_found", args, want.code, want.stderr)
	}
	same(args, run(bin, nil, args...), want)
	same(args, run(lonely, nil, args...), want)

	// Lines the front leaves to the CLI: the same through the front, and
	// an error naming the missing CLI without it.
	for _, args := range [][]string{
		{"sandbox", "exec", "--help"},
		{"sandbox", "exec", s.id, "echo", "no dash"},
		{"sandbox", "exec", "-e", "NOEQUALS", s.id, "--", "true"},
		{"sandbox", "exec", "--background", "-i", s.id, "--", "true"},
		{"sandbox", "exec", "--timeout", "soon", s.id, "--", "true"},
		{"sandbox", "ls", "--json"},
		{"version"},
	} {
		want := run(cli, nil, args...)
		same(args, run(bin, nil, args...), want)
		if r := run(lonely, nil, args...); r.code != 1 || !strings.Contains(string(r.stderr), "airlock-cli") {
			t.Errorf("%q without the CLI beside the front: exit %d stderr %q, want an error naming airlock-cli", args, r.code, r.stderr)
		}
	}
}
