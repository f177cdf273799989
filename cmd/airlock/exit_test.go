package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"airlock/client"
)

// TestExitForNamesTheLimit: the CLI's exit status and message say which
// limit ended a command: 124 and "limit: timeout" for its timeout; the
// signal's status as a shell reports it and "limit: fsize" or "limit:
// cpu" for the rlimits; a command that exits by itself says nothing.
func TestExitForNamesTheLimit(t *testing.T) {
	for _, c := range []struct {
		res  client.ExecResult
		code int
		msg  string
	}{
		{client.ExecResult{ExitCode: 137, TimedOut: true, Killed: true, Limit: "timeout", DurationMS: 1500}, 124, "timed out after 1.5s and was killed (limit: timeout)"},
		{client.ExecResult{ExitCode: 153, Signal: "XFSZ", Limit: "fsize"}, 153, "file size limit (limit: fsize, signal XFSZ)"},
		{client.ExecResult{ExitCode: 152, Signal: "XCPU", Limit: "cpu"}, 152, "CPU time limit (limit: cpu, signal XCPU)"},
		{client.ExecResult{ExitCode: 3}, 3, ""},
		{client.ExecResult{}, 0, ""},
	} {
		var info bytes.Buffer
		err := exitFor(&info, c.res)
		var ee exitError
		code := 0
		if errors.As(err, &ee) {
			code = ee.code
		} else if err != nil {
			t.Fatalf("%+v: %v", c.res, err)
		}
		if code != c.code || (c.msg == "") != (info.Len() == 0) || !strings.Contains(info.String(), c.msg) {
			t.Errorf("%+v: exit %d and %q, want %d and %q", c.res, code, info.String(), c.code, c.msg)
		}
	}
}
