//go:build !airlock_thin

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"airlock/bpf"
	"airlock/serve"
)

var serveFlags struct {
	config   string
	logLevel string
	check    bool
	instance string
	pinDir   string
	teardown bool
	node     bool
	procSys  string
}

var serveCmd = &cobra.Command{
	Use:   "serve --config FILE",
	Short: "Run the Airlock appliance (as root)",
	Long: `Run the appliance: the audit pipeline, the CA, dnsd, the proxy, the pinned
eBPF path, the sandbox runner and the control API, as configured in FILE
(see docs/config.md and serve/examples/lab.toml).

On start, sandboxes a previous appliance left running are adopted and
leftovers of a crash are cleaned up. SIGHUP reloads the policy directory
and control.principals_file (a broken file is rejected and the running
version stays). The TCP listener (control.tcp) speaks TLS and logs the
SHA-256 fingerprint clients pin ("control API on TLS"). SIGUSR1
reopens the JSONL stream file (after a log rotator renamed it). SIGINT or
SIGTERM stop the appliance; sandboxes keep running without network until
the next start adopts them.

With --node the appliance is a node agent for Kubernetes or Nomad: it runs
no Podman sandboxes of its own; the airlock-cni plugin attaches each pod's
veth to the same pinned path and registers it (docs/kubernetes.md).

Example:
  airlock serve --config /etc/airlock/airlock.toml
  airlock serve --node --config /etc/airlock/node.toml`,
	Args: cobra.NoArgs,
	RunE: runServe,
}

func init() {
	serveCmd.Flags().StringVarP(&serveFlags.config, "config", "c", "/etc/airlock/airlock.toml", "appliance config file")
	serveCmd.Flags().StringVar(&serveFlags.logLevel, "log-level", "info", "debug, info, warn or error")
	serveCmd.Flags().BoolVar(&serveFlags.check, "check", false, "only validate the config file and exit")
	serveCmd.Flags().StringVar(&serveFlags.instance, "instance", "default", "name of this appliance's containers and runtime files (reconcile touches only its own)")
	serveCmd.Flags().BoolVar(&serveFlags.teardown, "teardown", false,
		"remove the pinned kernel path and host guards a stopped appliance left (uninstall); sandboxes must be gone")
	serveCmd.Flags().BoolVar(&serveFlags.node, "node", false,
		"run as a node agent: no sandboxes of its own, pods attached by the airlock-cni plugin (e.g. airlock serve --node -c node.toml)")
	serveCmd.Flags().StringVar(&serveFlags.procSys, "proc-sys", "/proc/sys",
		"where the host's /proc/sys is writable; in a container whose own is read-only, mount it elsewhere (e.g. --proc-sys /host/proc/sys)")
	serveCmd.Flags().StringVar(&serveFlags.pinDir, "pin-dir", bpf.DefaultPinDir, "bpffs directory of the pinned kernel path")
	rootCmd.AddCommand(serveCmd)
}

func runServe(cmd *cobra.Command, _ []string) error {
	cfg, err := serve.Load(serveFlags.config)
	if errors.Is(err, serve.ErrNoConfig) {
		return fmt.Errorf("%w: write one (see serve/examples/lab.toml) and pass it with --config", err)
	}
	if err != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), err)
		return exitError{1}
	}
	if serveFlags.teardown {
		return teardown(cmd, cfg)
	}
	if serveFlags.check {
		fmt.Fprintf(cmd.OutOrStdout(), "%s: ok\n", serveFlags.config)
		return nil
	}
	if os.Geteuid() != 0 {
		return errors.New("airlock serve must run as root (it loads eBPF programs and manages network devices)")
	}
	log, err := newLogger(cmd.ErrOrStderr(), serveFlags.logLevel)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	engine := serve.PodmanEngine
	if serveFlags.node {
		engine = nil // node mode brings its own
	}
	app, err := serve.Start(ctx, cfg, serve.Options{Logger: log, Version: version, NewEngine: engine,
		Instance: serveFlags.instance, PinDir: serveFlags.pinDir, Node: serveFlags.node, ProcSys: serveFlags.procSys})
	if err != nil {
		return err
	}
	app.ReloadOnSIGHUP(ctx)
	app.ReopenOnSIGUSR1(ctx)
	serr := app.Serve(ctx)
	log.Info("shutting down")
	return errors.Join(serr, app.Close())
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// teardown is serve --teardown: serve.Teardown for this instance, said on
// stderr.
func teardown(cmd *cobra.Command, cfg *serve.Config) error {
	err := serve.Teardown(cfg, serve.Options{Instance: serveFlags.instance, PinDir: serveFlags.pinDir})
	if errors.Is(err, bpf.ErrNotPinned) {
		fmt.Fprintf(cmd.ErrOrStderr(), "airlock: nothing pinned at %s\n", serveFlags.pinDir)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "airlock: removed the kernel path at %s and its host guards\n", serveFlags.pinDir)
	return nil
}
