package serve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"airlock/bpf"
	"airlock/runner"
	"airlock/runner/podman"
)

// PodmanEngine is the appliance's EngineFactory: the sandbox user's Podman
// service at podman.socket (default the user's standard socket), started
// if it does not answer and started again if it dies while the appliance
// runs (podman.Connect). The closer stops a service it started; sandboxes
// keep running under conmon and the next start adopts them.
func PodmanEngine(ctx context.Context, cfg *Config, log *slog.Logger) (runner.Engine, io.Closer, error) {
	eng, err := podman.Connect(ctx, podman.ServiceConfig{User: cfg.Podman.User, Socket: cfg.Podman.Socket, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	return eng, eng, nil
}

// hostGuard is the kernel path's host guards for opts: opts.Guard, or the
// instance's own names when it is zero, on the runner's veths.
func hostGuard(opts Options) bpf.GuardConfig {
	g := opts.Guard
	if g == (bpf.GuardConfig{}) {
		g = guardFor(opts.Instance)
	}
	g.IfacePrefix = runner.VethPrefix
	return g
}

// guardFor names the host guards of an instance: the defaults for the
// default instance; for any other, an nft table, routing table and rule of
// its own (same mark: every appliance's guard accepts steered packets by
// it), so a second appliance on a host (the quickstart, a benchmark) never
// removes the first one's guards.
func guardFor(instance string) bpf.GuardConfig {
	if instance == "" || instance == "default" {
		return bpf.GuardConfig{}
	}
	h := fnv.New32a()
	h.Write([]byte(instance))
	n := 2000 + int(h.Sum32()%1000)
	return bpf.GuardConfig{NFTTable: "airlock-" + instance, Table: n, RulePriority: n}
}

// Teardown removes what a stopped appliance leaves on purpose: the pinned
// kernel path at opts.PinDir (pins, links) and the host guards Start names
// for opts (routing rule, nft table), for uninstalling and for the
// quickstart's cleanup. It refuses while the appliance still answers on
// its control socket or a sandbox's veth is still attached. Nothing pinned
// there: an error wrapping bpf.ErrNotPinned.
func Teardown(cfg *Config, opts Options) error {
	if c, err := net.DialTimeout("unix", cfg.Control.Socket, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("airlock serve is still running on %s: stop it first", cfg.Control.Socket)
	}
	dir := cmp.Or(opts.PinDir, bpf.DefaultPinDir)
	p, err := bpf.Reopen(dir, bpf.Options{Guard: hostGuard(opts)})
	if err != nil {
		return err
	}
	hs, err := p.Handles()
	live := 0
	for _, h := range hs {
		if _, ierr := net.InterfaceByIndex(h.Ifindex); h.Ifindex != 0 && ierr == nil {
			live++ // a veth still exists: a sandbox would lose its path
		}
	}
	if err == nil && live > 0 {
		return errors.Join(fmt.Errorf("%d sandbox(es) are still attached: start the appliance and remove them first (airlock sandbox rm)", live), p.Close())
	}
	if err := p.Teardown(); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}
