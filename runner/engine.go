package runner

import (
	"context"
	"io"
)

// Engine is the narrow interface the runner needs from a container engine.
// The Podman adapter (runner/podman) is the only implementation that talks
// to a real engine; tests use a fake that records every call.
//
// Implementations return errors wrapping ErrNotFound for missing containers
// or images and ErrUnsupported for operations the host cannot do.
type Engine interface {
	// ImageID resolves an image reference to its ID (ErrNotFound if absent).
	ImageID(ctx context.Context, ref string) (string, error)
	// Create creates (but does not start) a container and returns its ID.
	Create(ctx context.Context, s Spec) (string, error)
	Start(ctx context.Context, id string) error
	Inspect(ctx context.Context, id string) (Container, error)
	// List returns the containers carrying all the given labels.
	List(ctx context.Context, labels map[string]string) ([]Container, error)
	// Exec runs a process in a running container. started is called once the
	// process was requested from the engine. When ctx ends before the process
	// does, the engine kills it (and its descendants) and reports Killed.
	Exec(ctx context.Context, id string, p Process, started func()) (ExitStatus, error)
	// CopyIn extracts the tar stream into dir in the container.
	CopyIn(ctx context.Context, id, dir string, tar io.Reader) error
	// CopyOut writes path from the container to w as a tar stream.
	CopyOut(ctx context.Context, id, path string, w io.Writer) error
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	// Commit writes the container's filesystem to a local image repo:tag and
	// returns the image ID; the container keeps running.
	Commit(ctx context.Context, id, repo, tag string) (string, error)
	// Remove kills and removes the container; a missing container is not an
	// error.
	Remove(ctx context.Context, id string) error
}

// Container is what the runner needs to know about a container.
type Container struct {
	ID      string
	Name    string
	Image   string
	Running bool
	Pid     int // host PID of the container's init while running
	// ExitCode is the exit status of a container that stopped.
	ExitCode int
	Labels   map[string]string
}

// Process is one command for Engine.Exec. Env is KEY=VALUE, sorted.
type Process struct {
	Argv   []string
	Cwd    string
	Env    []string
	Stdin  io.Reader // nil: no stdin
	Stdout io.Writer
	Stderr io.Writer
}

// ExitStatus is how an exec ended.
type ExitStatus struct {
	Code   int
	Killed bool // the engine killed it because ctx ended
}
