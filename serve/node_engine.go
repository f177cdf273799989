package serve

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"airlock/runner"
)

// noEngine is the container engine of a node agent: it runs no sandboxes
// of its own (the node's pods come through the CNI plugin), so it lists
// none and refuses to create any.
type noEngine struct{}

var _ runner.Engine = noEngine{}

// nodeEngine is the EngineFactory of node mode.
func nodeEngine(context.Context, *Config, *slog.Logger) (runner.Engine, io.Closer, error) {
	return noEngine{}, nil, nil
}

func refuse() error {
	return fmt.Errorf("a node agent runs no sandboxes of its own; its pods come through the CNI plugin: %w", runner.ErrUnsupported)
}

func (noEngine) ImageID(context.Context, string) (string, error)     { return "", refuse() }
func (noEngine) Create(context.Context, runner.Spec) (string, error) { return "", refuse() }
func (noEngine) Start(context.Context, string) error                 { return refuse() }
func (noEngine) Inspect(context.Context, string) (runner.Container, error) {
	return runner.Container{}, fmt.Errorf("no container on a node agent: %w", runner.ErrNotFound)
}
func (noEngine) List(context.Context, map[string]string) ([]runner.Container, error) { return nil, nil }
func (noEngine) Exec(context.Context, string, runner.Process, func()) (runner.ExitStatus, error) {
	return runner.ExitStatus{}, refuse()
}
func (noEngine) CopyIn(context.Context, string, string, io.Reader) error  { return refuse() }
func (noEngine) CopyOut(context.Context, string, string, io.Writer) error { return refuse() }
func (noEngine) Pause(context.Context, string) error                      { return refuse() }
func (noEngine) Resume(context.Context, string) error                     { return refuse() }
func (noEngine) Commit(context.Context, string, string, string) (string, error) {
	return "", refuse()
}
func (noEngine) Remove(context.Context, string) error { return nil }
