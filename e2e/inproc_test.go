package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"airlock/bpf"
	"airlock/runner"
	"airlock/runner/podman"
	"airlock/serve"
)

// The appliance runs in the test process (serve.Start), not as `airlock
// serve`: only serve.Options can give it an instance name, pin directory,
// routing table and nft table of its own, so that it never touches another
// appliance on this host (other engineers' tests run alongside) and so
// that the test can remove every pin and guard it made. The CLI wiring is
// the same serve.Start call with the defaults.

// applianceGuard is this run's kernel-path guard: the default mark (every
// appliance's nft guard accepts steered packets by that mark, so two on
// one host must share it) with a routing table, rule and nft table of our
// own.
func applianceGuard(id string) bpf.GuardConfig {
	n := 3000 + rand.IntN(900)
	return bpf.GuardConfig{Table: n, RulePriority: n, NFTTable: "airlock-e2e-" + id}
}

// start starts the appliance in process and waits until it is healthy.
func (a *appliance) start() {
	t := a.t
	a.logFile = filepath.Join(a.dir, "serve.log")
	logf, err := os.Create(a.logFile)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg, err := serve.Load(a.config)
	if err != nil {
		t.Fatalf("the e2e appliance config does not load: %v", err)
	}
	id := a.w.ID
	pinDir := "/sys/fs/bpf/airlock-e2e-" + id
	guard := applianceGuard(id)
	opts := serve.Options{Logger: log, Version: "e2e", NewEngine: podmanEngine,
		Instance: "e2e" + id, PinDir: pinDir, Guard: guard}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	app, err := serve.Start(ctx, cfg, opts)
	t.Cleanup(func() { teardownPath(t, pinDir, guard); logf.Close() })
	if err != nil {
		t.Fatalf("start the appliance: %v\n%s", err, a.tail(40))
	}
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- app.Serve(sctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("appliance serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the appliance's API did not stop within 30s")
		}
		if err := app.Close(); err != nil {
			t.Errorf("close the appliance: %v", err)
		}
		if t.Failed() {
			t.Logf("appliance log (tail):\n%s", a.tail(80))
		}
	})
	a.waitHealthy(served)
}

func (a *appliance) waitHealthy(served chan error) {
	t := a.t
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		hctx, hcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := a.c.Health(hctx)
		hcancel()
		if err == nil {
			return
		}
		select {
		case serr := <-served:
			served <- serr
			t.Fatalf("the appliance's API stopped during start (%v):\n%s", serr, a.tail(40))
		case <-ctx.Done():
			t.Fatalf("the appliance is not healthy after 60s (%v):\n%s", err, a.tail(40))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// teardownPath removes the pins, links, routing rule and nft table the
// appliance left (it leaves them on purpose: fail closed).
func teardownPath(t interface{ Errorf(string, ...any) }, pinDir string, guard bpf.GuardConfig) {
	if _, err := os.Stat(pinDir); err != nil {
		return
	}
	p, err := bpf.Reopen(pinDir, bpf.Options{Guard: withPrefix(guard)})
	if err != nil {
		t.Errorf("reopen %s for teardown: %v", pinDir, err)
		os.RemoveAll(pinDir)
		return
	}
	if err := p.Teardown(); err != nil {
		t.Errorf("tear down %s: %v", pinDir, err)
	}
	os.RemoveAll(pinDir)
}

func withPrefix(g bpf.GuardConfig) bpf.GuardConfig {
	g.IfacePrefix = runner.VethPrefix
	return g
}

// podmanEngine is cmd/airlock's engine factory: the sandbox user's Podman
// service (started if it is not running) through the v5 bindings. A
// service this test starts is shared with every other user of the sandbox
// account on this host, so it is not stopped at the end (that would cut
// off their sandboxes); it exits by itself after two idle minutes.
func podmanEngine(ctx context.Context, cfg *serve.Config, log *slog.Logger) (runner.Engine, io.Closer, error) {
	svc, err := podman.StartService(ctx, podman.ServiceConfig{User: cfg.Podman.User, Logger: log, IdleTimeout: 2 * time.Minute})
	if err != nil {
		return nil, nil, err
	}
	eng, err := podman.NewEngine(ctx, svc.Socket())
	if err != nil {
		return nil, nil, fmt.Errorf("podman engine: %w", err)
	}
	return eng, nil, nil
}
