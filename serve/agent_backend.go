package serve

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"time"

	"airlock/client"
	"airlock/internal/agentwire"
	"airlock/runner"
)

var _ AgentBackend = (*Appliance)(nil)

// Processes lists a sandbox's commands from its agent.
func (a *Appliance) Processes(ctx context.Context, id string) ([]client.Process, error) {
	ps, err := a.runner.Processes(ctx, id)
	if err != nil {
		return nil, apiError(err)
	}
	out := make([]client.Process, 0, len(ps))
	for _, p := range ps {
		cp := client.Process{ID: p.ID, Pid: p.Pid, Argv: p.Argv, Cwd: p.Cwd, User: p.User, TTY: p.TTY,
			Started: time.Unix(0, p.StartedNS).UTC(), Running: p.Running}
		if e := p.Exit; e != nil {
			code := e.Code
			cp.ExitCode, cp.Signal, cp.TimedOut, cp.Killed = &code, e.Signal, e.TimedOut, e.Killed
		}
		out = append(out, cp)
	}
	return out, nil
}

// Kill ends a command and everything it spawned.
func (a *Appliance) Kill(ctx context.Context, id, execID string) error {
	return apiError(a.runner.Kill(ctx, id, execID))
}

// Signal sends a signal to a command.
func (a *Appliance) Signal(ctx context.Context, id, execID, sig string) error {
	return apiError(a.runner.Signal(ctx, id, execID, sig))
}

// Attach streams a command's output until it ends.
func (a *Appliance) Attach(ctx context.Context, id, execID string, stdout, stderr io.Writer) (client.ExecResult, error) {
	res, err := a.runner.Attach(ctx, id, execID, runner.ExecRequest{Stdout: stdout, Stderr: stderr})
	if err != nil {
		return client.ExecResult{}, apiError(err)
	}
	return execResult(res), nil
}

// execResult is the API's view of a runner result.
func execResult(res runner.ExecResult) client.ExecResult {
	return client.ExecResult{ID: res.ID, ExitCode: res.ExitCode, DurationMS: res.Duration.Milliseconds(),
		TimedOut: res.TimedOut, Killed: res.Killed, Limit: res.Limit, Truncated: res.StdoutTruncated || res.StderrTruncated,
		Agent: res.Agent, Pid: res.Pid, Signal: res.Signal, Running: res.Running, UtimeUS: res.UtimeUS,
		StimeUS: res.StimeUS, MaxRSSKB: res.MaxRSSKB, StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes}
}

// ReadFile sends a sandbox file as the response body. The length is known
// first (a stat), so a failure half way shows as a short body.
func (a *Appliance) ReadFile(ctx context.Context, id, path string, w http.ResponseWriter) error {
	res, err := a.runner.FileOp(ctx, id, agentwire.Request{V: agentwire.Version, Op: agentwire.OpStat, Path: path})
	if err != nil {
		return apiError(err)
	}
	if res.File != nil && res.File.Type == "file" {
		w.Header().Set("Content-Length", strconv.FormatInt(res.File.Size, 10))
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, err = a.runner.ReadFile(ctx, id, path, w)
	if err != nil {
		w.Header().Del("Content-Length")
	}
	return apiError(err)
}

// WriteFile writes a file atomically.
func (a *Appliance) WriteFile(ctx context.Context, id, path string, mode uint32, size int64, r io.Reader) (client.FileInfo, error) {
	fi, err := a.runner.WriteFile(ctx, id, path, mode, size, r)
	if err != nil {
		return client.FileInfo{}, apiError(err)
	}
	return fileInfo(fi), nil
}

func fileInfo(f runner.FileInfo) client.FileInfo {
	return client.FileInfo{Name: f.Name, Size: f.Size, Mode: f.Mode, Type: f.Type, ModTime: time.Unix(0, f.ModNS).UTC(),
		UID: f.UID, GID: f.GID, Symlink: f.Symlink}
}

func (a *Appliance) fileOp(ctx context.Context, id string, req agentwire.Request) (*agentwire.Result, error) {
	req.V = agentwire.Version
	res, err := a.runner.FileOp(ctx, id, req)
	return res, apiError(err)
}

// ListDir lists a directory.
func (a *Appliance) ListDir(ctx context.Context, id, path string) ([]client.FileInfo, error) {
	res, err := a.fileOp(ctx, id, agentwire.Request{Op: agentwire.OpList, Path: path})
	if err != nil {
		return nil, err
	}
	out := make([]client.FileInfo, 0, len(res.Files))
	for _, f := range res.Files {
		out = append(out, fileInfo(f))
	}
	return out, nil
}

// Stat describes a path.
func (a *Appliance) Stat(ctx context.Context, id, path string) (client.FileInfo, error) {
	res, err := a.fileOp(ctx, id, agentwire.Request{Op: agentwire.OpStat, Path: path})
	if err != nil {
		return client.FileInfo{}, err
	}
	return fileInfo(*res.File), nil
}

// Remove removes a path.
func (a *Appliance) Remove(ctx context.Context, id, path string, recursive bool) error {
	_, err := a.fileOp(ctx, id, agentwire.Request{Op: agentwire.OpRemove, Path: path, Recursive: recursive})
	return err
}

// Mkdir makes a directory.
func (a *Appliance) Mkdir(ctx context.Context, id, path string, parents bool, mode uint32) error {
	_, err := a.fileOp(ctx, id, agentwire.Request{Op: agentwire.OpMkdir, Path: path, Parents: parents, Mode: mode})
	return err
}

// secretValues are the values the runner redacts from a sandbox's exec
// records: the appliance's secrets and the sandbox's task secrets.
func (s *Secrets) secretValues(sandbox string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []string
	for _, v := range s.global {
		out = append(out, v)
	}
	for _, v := range s.task[sandbox] {
		out = append(out, v)
	}
	return out
}

// ExecTTY runs a command on a terminal through the agent.
func (a *Appliance) ExecTTY(ctx context.Context, id string, req client.ExecRequest, stdin io.Reader, resize <-chan client.Resize, stdout io.Writer) (client.ExecResult, error) {
	return a.execTerminal(ctx, id, req, stdin, resize, stdout, "", false)
}

// execTerminal runs a terminal session, recorded when record is set.
func (a *Appliance) execTerminal(ctx context.Context, id string, req client.ExecRequest, stdin io.Reader, resize <-chan client.Resize, stdout io.Writer, principal string, record bool) (client.ExecResult, error) {
	rs := make(chan agentwire.Resize)
	go func() {
		defer close(rs)
		for {
			select {
			case r := <-resize:
				select {
				case rs <- agentwire.Resize{Rows: r.Rows, Cols: r.Cols}:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	rr := runner.ExecRequest{Argv: req.Argv, Shell: req.Shell, User: req.User, Cwd: req.Cwd, Env: req.Env,
		Stdin: stdin, Stdout: stdout, Timeout: time.Duration(req.Timeout), TTY: true, Rows: req.Rows, Cols: req.Cols, Resize: rs,
		Record: record, Principal: principal}
	res, err := a.runner.Exec(ctx, id, rr)
	if err != nil {
		return client.ExecResult{}, apiError(err)
	}
	return execResult(res), nil
}
