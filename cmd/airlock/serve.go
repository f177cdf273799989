//go:build !airlock_thin

package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"airlock/bpf"
	"airlock/runner"
	"airlock/runner/podman"
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
	engine := podmanEngine
	if serveFlags.node {
		engine = nil // node mode brings its own
	}
	app, err := serve.Start(ctx, cfg, serve.Options{Logger: log, Version: version, NewEngine: engine,
		Instance: serveFlags.instance, PinDir: serveFlags.pinDir, Guard: guardFor(serveFlags.instance), Node: serveFlags.node,
		ProcSys: serveFlags.procSys})
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

// podmanEngine connects to the sandbox user's Podman service, starting it
// if it is not running.
func podmanEngine(ctx context.Context, cfg *serve.Config, log *slog.Logger) (runner.Engine, io.Closer, error) {
	socket := cfg.Podman.Socket
	var closer io.Closer
	if socket == "" {
		if err := ensureSocketDir(cfg.Podman.User); err != nil {
			return nil, nil, err
		}
		svc, err := podman.StartService(ctx, podman.ServiceConfig{User: cfg.Podman.User, Logger: log})
		if err != nil {
			return nil, nil, err
		}
		socket, closer = svc.Socket(), svc
	}
	eng, err := podman.NewEngine(ctx, socket)
	if err != nil {
		if closer != nil {
			closer.Close()
		}
		return nil, nil, err
	}
	return eng, closer, nil
}

// ensureSocketDir creates /run/user/UID/podman for the sandbox user: the
// podman service binds its socket there and does not create the directory.
func ensureSocketDir(name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("sandbox user %q: %w (run make setup)", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	run := filepath.Join("/run/user", u.Uid)
	for _, d := range []string{run, filepath.Join(run, "podman")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// teardown removes what a stopped appliance leaves on purpose (pins,
// links, routing rule, nft guard table): for uninstalling and for the
// quickstart's cleanup. It refuses while the appliance still answers.
func teardown(cmd *cobra.Command, cfg *serve.Config) error {
	if c, err := net.DialTimeout("unix", cfg.Control.Socket, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("airlock serve is still running on %s: stop it first", cfg.Control.Socket)
	}
	g := guardFor(serveFlags.instance)
	g.IfacePrefix = runner.VethPrefix
	p, err := bpf.Reopen(serveFlags.pinDir, bpf.Options{Guard: g})
	if errors.Is(err, bpf.ErrNotPinned) {
		fmt.Fprintf(cmd.ErrOrStderr(), "airlock: nothing pinned at %s\n", serveFlags.pinDir)
		return nil
	}
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
		p.Close()
		return fmt.Errorf("%d sandbox(es) are still attached: start the appliance and remove them first (airlock sandbox rm)", live)
	}
	if err := p.Teardown(); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "airlock: removed the kernel path at %s and its host guards\n", serveFlags.pinDir)
	return os.RemoveAll(serveFlags.pinDir)
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
