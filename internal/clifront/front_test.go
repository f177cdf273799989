package clifront

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"airlock/client/wire"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		args []string
		want Exec
	}{
		{[]string{"sandbox", "exec", "abc", "--", "echo", "hi"}, Exec{Sandbox: "abc", Req: wire.ExecRequest{Argv: []string{"echo", "hi"}}}},
		{[]string{"sandbox", "exec", "--cwd", "/tmp", "abc", "--", "pwd"}, Exec{Sandbox: "abc", Req: wire.ExecRequest{Argv: []string{"pwd"}, Cwd: "/tmp"}}},
		{[]string{"sandbox", "exec", "abc", "--cwd=/tmp", "-u", "nobody", "--", "pwd", "--cwd", "x"},
			Exec{Sandbox: "abc", Req: wire.ExecRequest{Argv: []string{"pwd", "--cwd", "x"}, Cwd: "/tmp", User: "nobody"}}},
		{[]string{"sandbox", "exec", "-e", "A=1", "--env=B=x=y", "--env", "C=", "abc", "--", "env"},
			Exec{Sandbox: "abc", Req: wire.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"A": "1", "B": "x=y", "C": ""}}}},
		{[]string{"sandbox", "exec", "--timeout", "1m30s", "--background", "abc", "--", "sleep", "9"},
			Exec{Sandbox: "abc", Req: wire.ExecRequest{Argv: []string{"sleep", "9"}, Timeout: wire.Duration(90 * time.Second), Background: true}}},
		{[]string{"sandbox", "exec", "-i", "--socket", "/s.sock", "abc", "--", "cat"}, Exec{Sandbox: "abc", Socket: "/s.sock", Stdin: true, Req: wire.ExecRequest{Argv: []string{"cat"}}}},
		{[]string{"sandbox", "exec", "abc", "--", "--", "-x"}, Exec{Sandbox: "abc", Req: wire.ExecRequest{Argv: []string{"--", "-x"}}}},
	} {
		got, ok := Parse(c.args)
		if !ok || !reflect.DeepEqual(got, c.want) {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", c.args, got, ok, c.want)
		}
	}
	// The CLI's to run: other commands, what the front does not take in
	// full, and every usage error (the CLI explains it).
	for _, args := range [][]string{
		nil,
		{"sandbox"},
		{"sandbox", "exec"},
		{"sandbox", "ls"},
		{"run", "--", "echo"},
		{"sandbox", "exec", "abc", "echo", "hi"},        // no --
		{"sandbox", "exec", "abc", "--"},                // no command
		{"sandbox", "exec", "--", "echo"},               // no sandbox
		{"sandbox", "exec", "a", "b", "--", "echo"},     // two ids
		{"sandbox", "exec", "-it", "abc", "--", "sh"},   // a terminal
		{"sandbox", "exec", "-t", "abc", "--", "sh"},    // a terminal
		{"sandbox", "exec", "--tty", "abc", "--", "sh"}, // a terminal
		{"sandbox", "exec", "--help"},                   // help
		{"sandbox", "exec", "-h", "abc", "--", "x"},     // help
		{"sandbox", "exec", "--url", "https://a.example.test:7443", "abc", "--", "x"},
		{"sandbox", "exec", "--token-file", "t", "abc", "--", "x"},
		{"sandbox", "exec", "--cwd", "abc", "--", "x"}, // value missing: abc taken, no id
		{"sandbox", "exec", "abc", "--cwd", "--", "x"}, // value is --
		{"sandbox", "exec", "-e", "NOEQUALS", "abc", "--", "x"},
		{"sandbox", "exec", "-e", "=v", "abc", "--", "x"},
		{"sandbox", "exec", "--timeout", "soon", "abc", "--", "x"},
		{"sandbox", "exec", "--background=false", "abc", "--", "x"},
		{"sandbox", "exec", "--background", "-i", "abc", "--", "x"},
		{"sandbox", "exec", "-uroot", "abc", "--", "x"}, // attached short value
		{"sandbox", "exec", "-", "abc", "--", "x"},
	} {
		if got, ok := Parse(args); ok {
			t.Errorf("Parse(%q) = %+v, want it left to the CLI", args, got)
		}
	}
}

func TestExitStatus(t *testing.T) {
	for _, c := range []struct {
		res  wire.ExecResult
		code int
		info string
	}{
		{wire.ExecResult{}, 0, ""},
		{wire.ExecResult{ExitCode: 3}, 3, ""},
		{wire.ExecResult{ExitCode: 137, TimedOut: true, DurationMS: 1500}, 124, "airlock: the command timed out after 1.5s and was killed (limit: timeout)\n"},
		{wire.ExecResult{ExitCode: 153, Limit: "fsize", Signal: "SIGXFSZ"}, 153, "airlock: the command was ended by the file size limit (limit: fsize, signal SIGXFSZ)\n"},
		{wire.ExecResult{ExitCode: 137, Killed: true, Truncated: true}, 137, "airlock: the command was killed\nairlock: captured output was truncated in the audit record (the stream here is complete)\n"},
	} {
		var b bytes.Buffer
		if code := ExitStatus(&b, c.res); code != c.code || b.String() != c.info {
			t.Errorf("ExitStatus(%+v) = %d %q, want %d %q", c.res, code, b.String(), c.code, c.info)
		}
	}
}
