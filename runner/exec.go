package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"airlock/audit"
)

// Exec runs a command in a sandbox, streaming its output to req.Stdout and
// req.Stderr as it comes and capturing up to req.MaxCapture bytes of each.
// A command still running at its timeout (or when ctx ends) is killed with
// its descendants. Every exec emits requested, started and finished events.
// The error is only for commands that could not be run; a command that ran
// and failed is reported by ExitCode.
func (r *Runner) Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error) {
	if (len(req.Argv) == 0 || req.Argv[0] == "") && req.Shell == "" {
		return ExecResult{}, fmt.Errorf("exec in %s: empty command: %w", id, ErrInvalid)
	}
	if len(req.Argv) > 0 && req.Shell != "" {
		return ExecResult{}, fmt.Errorf("exec in %s: both argv and a shell line: %w", id, ErrInvalid)
	}
	if req.Cwd != "" && !path.IsAbs(req.Cwd) {
		return ExecResult{}, fmt.Errorf("exec in %s: cwd %q must be absolute: %w", id, req.Cwd, ErrInvalid)
	}
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return ExecResult{}, fmt.Errorf("exec in %s: bad environment variable name %q: %w", id, k, ErrInvalid)
		}
	}
	sb, err := r.live(id, req.setup)
	if err != nil {
		return ExecResult{}, fmt.Errorf("exec: %w", err)
	}
	if req.Principal == "" {
		req.Principal = audit.PrincipalFrom(ctx)
	}
	r.busy(id, 1) // the idle clock stands still while a command runs
	defer r.busy(id, -1)
	req.Env = r.claimEnv(id, req.Env)
	res := ExecResult{ID: r.cfg.NewID()}
	cwd := cmpOr(req.Cwd, WorkspaceDir)
	if a := r.agentOf(sb.ID); a != nil {
		return r.execAgent(ctx, sb, a, req, res, cwd)
	}
	if req.TTY || req.Background || req.User != "" {
		return ExecResult{}, fmt.Errorf("exec in %s: a terminal, a background command or another user needs the in-sandbox agent (%s): %w",
			id, cmpOr(sb.AgentError, "not in use"), ErrUnsupported)
	}
	if req.Shell != "" {
		req.Argv = []string{"/bin/sh", "-c", req.Shell}
	}
	res.Agent = PodmanExecName
	r.execEvent(sb.ID, res.ID, req.Principal, "requested", req.Argv, cwd, nil, "")

	timeout := cmpOr(req.Timeout, sb.ExecTimeout)
	ectx, cancel := context.WithTimeoutCause(ctx, timeout, errExecTimeout)
	defer cancel()
	max := cmpOr(req.MaxCapture, DefaultMaxCapture)
	stdout, stderr := &capture{max: max}, &capture{max: max}
	p := Process{Argv: slices.Clone(req.Argv), Cwd: cwd, Env: envList(req.Env), Stdin: req.Stdin,
		Stdout: teeWriter(stdout, req.Stdout), Stderr: teeWriter(stderr, req.Stderr)}

	start := time.Now()
	st, err := r.cfg.Engine.Exec(ectx, sb.ContainerID, p, func() {
		r.execEvent(sb.ID, res.ID, req.Principal, "started", req.Argv, cwd, nil, "")
	})
	res.Duration = time.Since(start)
	if err != nil {
		res.ExitCode, res.Killed = -1, st.Killed
		r.execEvent(sb.ID, res.ID, req.Principal, "finished", req.Argv, cwd, &res, "engine error: "+err.Error())
		return res, fmt.Errorf("exec in %s: %w", id, err)
	}
	res.ExitCode, res.Killed = st.Code, st.Killed
	res.TimedOut = st.Killed && errors.Is(context.Cause(ectx), errExecTimeout)
	res.Limit = LimitOf(res.TimedOut, "") // the engine reports no signal
	res.Stdout, res.StdoutTruncated = stdout.result()
	res.Stderr, res.StderrTruncated = stderr.result()
	r.execEvent(sb.ID, res.ID, req.Principal, "finished", req.Argv, cwd, &res, "")
	return res, nil
}

var errExecTimeout = errors.New("exec timeout")

func (r *Runner) execEvent(sandbox, execID, principal, stage string, argv []string, cwd string, res *ExecResult, reason string) {
	e := audit.New(audit.KindExec, sandbox)
	e.ID, e.Reason = execID, reason
	e.Exec = &audit.Exec{Stage: stage, Argv: slices.Clone(argv), Cwd: cwd, Agent: PodmanExecName, Principal: principal}
	if res != nil {
		code := res.ExitCode
		e.Exec.ExitCode = &code
		e.Exec.DurationMS = res.Duration.Milliseconds()
		e.Exec.TimedOut, e.Exec.Killed, e.Exec.Limit = res.TimedOut, res.Killed, res.Limit
	}
	r.cfg.Emitter.Emit(e)
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// capture keeps the first max bytes written to it and counts the rest.
type capture struct {
	max     int
	buf     []byte
	dropped int64
}

func (c *capture) Write(p []byte) (int, error) {
	if room := c.max - len(c.buf); room > 0 {
		n := min(room, len(p))
		c.buf = append(c.buf, p[:n]...)
		c.dropped += int64(len(p) - n)
	} else {
		c.dropped += int64(len(p))
	}
	return len(p), nil
}

func (c *capture) result() ([]byte, bool) {
	if c.dropped == 0 {
		return c.buf, false
	}
	return append(c.buf, fmt.Sprintf("%s[%d bytes omitted]\n", TruncationMarker, c.dropped)...), true
}

func teeWriter(c *capture, w io.Writer) *tee {
	return &tee{c: c, w: &discardErr{w: w}}
}

type tee struct {
	c *capture
	w *discardErr
}

func (t *tee) Write(p []byte) (int, error) {
	t.c.Write(p)
	return t.w.Write(p)
}
