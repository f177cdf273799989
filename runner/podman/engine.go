// Package podman is the runner's adapter to rootless Podman: the only
// package that imports the Podman v5 bindings, and the manager of the
// sandbox user's `podman system service`.
//
// Build with the tags
// "remote exclude_graphdriver_btrfs btrfs_noversion exclude_graphdriver_devicemapper containers_image_openpgp".
package podman

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/api/handlers"
	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/domain/entities/types"
	"github.com/containers/podman/v5/pkg/errorhandling"
	"go.podman.io/storage/pkg/archive"

	"airlock/runner"
)

// Engine is runner.Engine on a Podman service socket. The adapter runs as
// root: exec timeouts kill the exec's host PID directly (the 4.3 service
// cannot stop an attached exec).
type Engine struct {
	conn context.Context // carries the bindings client

	// With Connect: the service config, to start the service again when
	// its socket stops answering, and the service this engine started.
	svcCfg *ServiceConfig
	mu     sync.Mutex
	svcs   []*Service
}

var _ runner.Engine = (*Engine)(nil)

// NewEngine connects to the Podman service at socket (a unix socket path).
func NewEngine(ctx context.Context, socket string) (*Engine, error) {
	conn, err := bindings.NewConnection(context.WithoutCancel(ctx), "unix://"+socket)
	if err != nil {
		return nil, fmt.Errorf("podman: connect to %s: %w", socket, err)
	}
	return &Engine{conn: conn}, nil
}

// Connect starts the sandbox user's Podman service if it is not running and
// connects to it. When the service later stops answering (it died, or it was
// stopped), the next call starts it again and retries once. Close stops any
// service this engine started.
func Connect(ctx context.Context, cfg ServiceConfig) (*Engine, error) {
	svc, err := StartService(ctx, cfg)
	if err != nil {
		return nil, err
	}
	e, err := NewEngine(ctx, svc.Socket())
	if err != nil {
		return nil, errors.Join(err, svc.Close())
	}
	e.svcCfg = &cfg
	e.svcs = []*Service{svc}
	return e, nil
}

// StartedService reports whether this engine started a Podman service.
func (e *Engine) StartedService() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.svcs {
		if s.Started() {
			return true
		}
	}
	return false
}

// Close stops the Podman service if this engine started it. Sandboxes keep
// running (conmon holds them), and the next Connect adopts them.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for _, s := range e.svcs {
		errs = append(errs, s.Close())
	}
	e.svcs = nil
	return errors.Join(errs...)
}

// do runs f with a client context; if the service socket refused the
// connection and the engine manages the service, it starts the service
// again and retries f once (the request never reached a server).
func (e *Engine) do(ctx context.Context, f func(c context.Context) error) error {
	c, done := e.call(ctx)
	err := f(c)
	done()
	if err == nil || e.svcCfg == nil || !(errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)) {
		return err
	}
	svc, serr := StartService(ctx, *e.svcCfg)
	if serr != nil {
		return errors.Join(err, serr)
	}
	e.mu.Lock()
	e.svcs = append(e.svcs, svc)
	e.mu.Unlock()
	c, done = e.call(ctx)
	defer done()
	return f(c)
}

// call returns a context carrying the client that ends with parent.
func (e *Engine) call(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(e.conn)
	stop := context.AfterFunc(parent, func() { cancel(context.Cause(parent)) })
	return ctx, func() { stop(); cancel(nil) }
}

// ImageID implements runner.Engine.
func (e *Engine) ImageID(ctx context.Context, ref string) (string, error) {
	var id string
	err := e.do(ctx, func(c context.Context) error {
		img, err := images.GetImage(c, ref, nil)
		if err == nil {
			id = img.ID
		}
		return err
	})
	return id, wrap(err)
}

// Create implements runner.Engine.
func (e *Engine) Create(ctx context.Context, s runner.Spec) (string, error) {
	var id string
	err := e.do(ctx, func(c context.Context) error {
		resp, err := containers.CreateWithSpec(c, SpecGen(s), nil)
		id = resp.ID
		return err
	})
	return id, wrap(err)
}

// Start implements runner.Engine.
func (e *Engine) Start(ctx context.Context, id string) error {
	return wrap(e.do(ctx, func(c context.Context) error { return containers.Start(c, id, nil) }))
}

// Inspect implements runner.Engine.
func (e *Engine) Inspect(ctx context.Context, id string) (runner.Container, error) {
	var d *define.InspectContainerData
	err := e.do(ctx, func(c context.Context) (err error) {
		d, err = containers.Inspect(c, id, nil)
		return err
	})
	if err != nil {
		return runner.Container{}, wrap(err)
	}
	out := runner.Container{ID: d.ID, Name: d.Name, Image: d.ImageName}
	if d.Config != nil {
		out.Labels = d.Config.Labels
	}
	if d.State != nil {
		out.Running, out.Pid, out.ExitCode = d.State.Running, d.State.Pid, int(d.State.ExitCode)
	}
	return out, nil
}

// List implements runner.Engine.
func (e *Engine) List(ctx context.Context, labels map[string]string) ([]runner.Container, error) {
	var f []string
	for k, v := range labels {
		f = append(f, k+"="+v)
	}
	all := true
	var cs []types.ListContainer
	err := e.do(ctx, func(c context.Context) (err error) {
		cs, err = containers.List(c, &containers.ListOptions{All: &all, Filters: map[string][]string{"label": f}})
		return err
	})
	if err != nil {
		return nil, wrap(err)
	}
	out := make([]runner.Container, 0, len(cs))
	for _, x := range cs {
		name := ""
		if len(x.Names) > 0 {
			name = x.Names[0]
		}
		out = append(out, runner.Container{ID: x.ID, Name: name, Image: x.Image, Running: x.State == "running",
			Pid: x.Pid, ExitCode: int(x.ExitCode), Labels: x.Labels})
	}
	return out, nil
}

// Exec implements runner.Engine.
func (e *Engine) Exec(ctx context.Context, id string, p runner.Process, started func()) (runner.ExitStatus, error) {
	c, done := e.call(context.WithoutCancel(ctx)) // the stream is ended by killing the process
	defer done()
	cfg := new(handlers.ExecCreateConfig)
	cfg.Cmd, cfg.WorkingDir, cfg.Env = p.Argv, p.Cwd, p.Env
	cfg.AttachStdout, cfg.AttachStderr, cfg.AttachStdin = true, true, p.Stdin != nil
	var session string
	err := e.do(ctx, func(c context.Context) (err error) {
		session, err = containers.ExecCreate(c, id, cfg)
		return err
	})
	if err != nil {
		return runner.ExitStatus{}, wrap(err)
	}
	started()
	attached := make(chan error, 1)
	go func() { attached <- containers.ExecStartAndAttach(c, session, attachOptions(p)) }()
	var st runner.ExitStatus
	select {
	case err = <-attached:
	case <-ctx.Done():
		st.Killed = true
		if err = e.killUntilEnded(c, id, session, attached); err != nil {
			return st, fmt.Errorf("exec at %v: %w", context.Cause(ctx), err)
		}
		err = nil
	}
	if err != nil {
		return st, wrap(err)
	}
	return e.exitCode(c, session, st)
}

// killUntilEnded kills the exec's processes until its output stream ends. A
// session whose process has not started yet when the deadline passes (the
// service is slow under load) is killed as soon as it has a PID, so one kill
// attempt is never enough.
func (e *Engine) killUntilEnded(c context.Context, id, session string, attached <-chan error) error {
	giveUp := time.After(60 * time.Second)
	for {
		if err := e.killExec(c, id, session); err != nil {
			return fmt.Errorf("kill: %w", err)
		}
		select {
		case <-attached:
			return nil
		case <-giveUp:
			return errors.New("killed, but its output stream did not end")
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func attachOptions(p runner.Process) *containers.ExecStartAndAttachOptions {
	o := new(containers.ExecStartAndAttachOptions).WithAttachOutput(true).WithAttachError(true).
		WithOutputStream(orDiscard(p.Stdout)).WithErrorStream(orDiscard(p.Stderr))
	if p.Stdin != nil {
		o = o.WithAttachInput(true).WithInputStream(*bufio.NewReader(p.Stdin))
	}
	return o
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// exitCode waits briefly for the session to record its exit code.
func (e *Engine) exitCode(c context.Context, session string, st runner.ExitStatus) (runner.ExitStatus, error) {
	for i := 0; ; i++ {
		in, err := containers.ExecInspect(c, session, nil)
		if err != nil {
			return st, wrap(err)
		}
		if !in.Running || i >= 50 {
			st.Code = in.ExitCode
			if in.Running {
				return st, fmt.Errorf("exec session %s still running after its stream ended", session)
			}
			return st, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CopyIn implements runner.Engine.
func (e *Engine) CopyIn(ctx context.Context, id, dir string, tar io.Reader) error {
	c, done := e.call(ctx)
	defer done()
	copyFn, err := containers.CopyFromArchive(c, id, dir, tar)
	if err != nil {
		return wrap(err)
	}
	if err := copyFn(); err != nil {
		return e.explainCopyIn(c, id, dir, err)
	}
	return nil
}

// explainCopyIn turns the bare status the bindings return into a reason.
func (e *Engine) explainCopyIn(c context.Context, id, dir string, err error) error {
	st, serr := containers.Stat(c, id, dir)
	switch {
	case serr != nil && st == nil:
		return fmt.Errorf("%s does not exist in the sandbox: %w", dir, runner.ErrNotFound)
	case st != nil && !st.IsDir:
		return fmt.Errorf("%s is not a directory", dir)
	case strings.Contains(err.Error(), "500"):
		return fmt.Errorf("%s is not writable (a read-only file system?): podman: %w", dir, err)
	}
	return wrap(err)
}

// CopyOut implements runner.Engine.
func (e *Engine) CopyOut(ctx context.Context, id, path string, w io.Writer) error {
	c, done := e.call(ctx)
	defer done()
	copyFn, err := containers.CopyToArchive(c, id, path, w)
	if err != nil {
		return wrap(err)
	}
	return wrap(copyFn())
}

// Pause implements runner.Engine.
func (e *Engine) Pause(ctx context.Context, id string) error {
	return wrap(e.do(ctx, func(c context.Context) error { return containers.Pause(c, id, nil) }))
}

// Resume implements runner.Engine.
func (e *Engine) Resume(ctx context.Context, id string) error {
	return wrap(e.do(ctx, func(c context.Context) error { return containers.Unpause(c, id, nil) }))
}

// Commit implements runner.Engine.
func (e *Engine) Commit(ctx context.Context, id, repo, tag string) (string, error) {
	c, done := e.call(ctx)
	defer done()
	pause := false
	r, err := containers.Commit(c, id, new(containers.CommitOptions).WithRepo(repo).WithTag(tag).WithPause(pause))
	if err != nil {
		return "", wrap(err)
	}
	return r.ID, nil
}

// Remove implements runner.Engine.
func (e *Engine) Remove(ctx context.Context, id string) error {
	err := e.do(ctx, func(c context.Context) error {
		_, err := containers.Remove(c, id, new(containers.RemoveOptions).WithForce(true).WithTimeout(0).WithVolumes(true))
		return err
	})
	if err = wrap(err); errors.Is(err, runner.ErrNotFound) {
		return nil
	}
	return err
}

// wrap maps the service's errors to the runner's sentinels.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	var em *errorhandling.ErrorModel
	if errors.As(err, &em) {
		msg := em.Error()
		switch {
		case em.Code() == http.StatusNotFound || strings.Contains(msg, "no such"):
			return fmt.Errorf("podman: %s: %w", msg, runner.ErrNotFound)
		case strings.Contains(msg, "cgroup V1") || strings.Contains(msg, "cgroups V1"):
			return fmt.Errorf("podman: %s: %w", msg, runner.ErrUnsupported)
		}
		return fmt.Errorf("podman: %s (status %d)", msg, em.Code())
	}
	return fmt.Errorf("podman: %w", err)
}

// RemoveImage removes a local image (a snapshot the caller is done with).
func (e *Engine) RemoveImage(ctx context.Context, ref string) error {
	c, done := e.call(ctx)
	defer done()
	_, errs := images.Remove(c, []string{ref}, nil)
	return wrap(errors.Join(errs...))
}

// Changes lists what changed in a container's filesystem since it was
// created from its image (runner's snapshot templates).
func (e *Engine) Changes(ctx context.Context, id string) ([]runner.Change, error) {
	c, done := e.call(ctx)
	defer done()
	cs, err := containers.Diff(c, id, nil)
	if err != nil {
		return nil, wrap(err)
	}
	out := make([]runner.Change, 0, len(cs))
	for _, x := range cs {
		kind := "modified"
		switch x.Kind {
		case archive.ChangeAdd:
			kind = "added"
		case archive.ChangeDelete:
			kind = "deleted"
		}
		out = append(out, runner.Change{Path: x.Path, Kind: kind})
	}
	return out, nil
}
