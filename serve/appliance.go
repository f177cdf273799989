package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"airlock/audit"
	"airlock/bpf"
	"airlock/certs"
	"airlock/dnsd"
	"airlock/internal/safefile"
	"airlock/internal/tproxy"
	"airlock/preview"
	"airlock/proxy"
	"airlock/runner"
)

// EngineFactory connects to the container engine for the sandbox user
// (the Podman adapter in production). The closer stops whatever it
// started (a podman service); it may be nil.
type EngineFactory func(ctx context.Context, cfg *Config, log *slog.Logger) (runner.Engine, io.Closer, error)

// Options are the parts of the appliance that are not configuration.
type Options struct {
	Logger  *slog.Logger
	Version string
	// NewEngine is required (PodmanEngine in production).
	NewEngine EngineFactory
	// Instance names this appliance's containers and veths; reconcile only
	// touches its own. Default "default".
	Instance string
	// PinDir and Guard select the kernel path's pins and host guards
	// (tests use their own so they never touch a production appliance).
	// A zero Guard: the instance's own (the defaults for "default").
	PinDir string
	Guard  bpf.GuardConfig
	// JSONL overrides the config's stream destination (tests).
	JSONL io.Writer
	// AgentBinary is the airlock-init run as each sandbox's PID 1; empty:
	// the one beside the executable (make build), if any.
	AgentBinary string
	// ProcSys is where the host's /proc/sys is writable (bpf.Options).
	ProcSys string
	// Node makes the appliance a node agent (serve --node): no sandboxes
	// of its own (NewEngine may be nil), pods attached by the CNI plugin
	// through the control API (serve/node.go).
	Node bool
}

// Appliance is a running `airlock serve`: audit pipeline, CA, policies,
// secrets, dnsd, proxy, the kernel path, the runner and the control API.
// Start builds it; Serve runs the API; Close shuts it down (sandboxes keep
// running and lose the network until a new appliance adopts them).
type Appliance struct {
	cfg  *Config
	opts Options
	log  *slog.Logger

	pipeline  *audit.Pipeline
	tap       *tap
	metrics   *Metrics
	ca        *certs.CA
	policies  *policySet
	secrets   *Secrets
	approvals *Approvals
	registry  *Registry
	path      *bpf.Path
	dns       *dnsd.Server
	proxy     *proxy.Proxy
	engineC   io.Closer
	runner    *runner.Runner
	lockdown  *lockdown
	advisory  *advisories         // [packages] osv, reloaded with the policies
	sbLocks   *sandboxLocks       // the lockfiles sandboxes were created with
	pcache    *proxy.PackageCache // [packages.cache], nil when off
	attrib    *attributor         // which process made a flow or query
	node      *nodeState          // node mode only
	previews  *preview.Manager    // nil unless [preview] is configured

	mu      sync.Mutex
	handles map[string]bpf.Handle // sandbox → kernel attachment
	// resetting: sandboxes whose container Reset is replacing; their
	// detach keeps secrets, approvals and registration.
	resetting map[string]bool
	closers   []func() error // in start order; run in reverse
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	started   time.Time
	reconcil  runner.ReconcileReport
	// principals: the TCP listener's callers (nil until Serve).
	principals atomic.Pointer[principalStore]
}

// Start brings the appliance up in dependency order. On error everything
// already started is stopped again.
func Start(ctx context.Context, cfg *Config, opts Options) (_ *Appliance, err error) {
	if opts.Node && opts.NewEngine == nil {
		opts.NewEngine = nodeEngine
	}
	if opts.NewEngine == nil {
		return nil, errors.New("serve: no container engine factory")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Instance == "" {
		opts.Instance = "default"
	}
	a := &Appliance{cfg: cfg, opts: opts, log: opts.Logger, handles: map[string]bpf.Handle{}, attrib: newAttributor(),
		resetting: map[string]bool{}, started: time.Now()}
	bg, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"state directory", a.startState},
		{"audit", a.startAudit},
		{"certificate authority", a.startCA},
		{"policies", a.startPolicies},
		{"secrets", a.startSecrets},
		{"kernel path", a.startPath},
		{"dns", func(context.Context) error { return a.startDNS(bg) }},
		{"proxy", a.startProxy},
		{"container engine", a.startRunner},
		{"pods", a.startNode},
		{"reconcile", a.reconcile},
		{"warm pool", a.startWarm},
		{"lockdown", a.startLockdown},
		{"previews", a.startPreview},
		{"drop events", func(context.Context) error { return a.startDrops(bg) }},
	}
	for _, s := range steps {
		t := time.Now()
		if err := s.fn(ctx); err != nil {
			return nil, fmt.Errorf("start %s: %w", s.name, err)
		}
		a.log.Debug("started", "component", s.name, "took", time.Since(t))
	}
	return a, nil
}

func (a *Appliance) onClose(f func() error) { a.closers = append(a.closers, f) }

func (a *Appliance) startState(context.Context) error {
	if err := prepareStateDir("state_dir", a.cfg.StateDir); err != nil {
		return err
	}
	if d := filepath.Dir(a.cfg.Audit.Store); filepath.Clean(d) != filepath.Clean(a.cfg.StateDir) {
		if err := prepareStateDir("audit.store", d); err != nil {
			return err
		}
	}
	if a.cfg.Audit.Store != "" {
		lock, err := lockStore(a.cfg.Audit.Store + ".lock")
		if err != nil {
			return err
		}
		a.onClose(lock.Close)
	}
	// Searchable (not readable) by others: the sandbox user must reach the
	// runner's resolv.conf and CA bundle below it.
	dir := a.runtimeDir()
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	for d := dir; d != filepath.Dir(a.cfg.RuntimeDir); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
	}
	return searchableByOthers(filepath.Dir(a.cfg.RuntimeDir))
}

// runtimeDir is this instance's runner state directory.
func (a *Appliance) runtimeDir() string {
	return filepath.Join(a.cfg.RuntimeDir, a.opts.Instance, "sandboxes")
}

// searchableByOthers checks that dir and its parents let other users
// (the sandbox user) pass through, and says what to change if not.
func searchableByOthers(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("runtime_dir: %s (mode %04o) is not searchable by the sandbox user, who must reach the "+
				"sandboxes' resolv.conf and CA bundle below it: run `chmod o+x %s` or choose another runtime_dir",
				d, st.Mode().Perm(), d)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

func (a *Appliance) startAudit(context.Context) error {
	ac := audit.Config{StateDir: filepath.Dir(a.cfg.Audit.Store), Logger: a.log.With("component", "audit"),
		Node: a.cfg.Audit.Node, StreamFormat: a.cfg.Audit.JSONLFormat, ProductVersion: a.opts.Version}
	if filepath.Base(a.cfg.Audit.Store) != audit.StoreFile {
		return fmt.Errorf("audit.store must be named %s (got %s)", audit.StoreFile, a.cfg.Audit.Store)
	}
	switch {
	case a.opts.JSONL != nil:
		ac.StreamWriter = a.opts.JSONL
	case a.cfg.Audit.JSONL == "stdout":
		ac.StreamWriter = os.Stdout
	default:
		ac.StreamPath = a.cfg.Audit.JSONL
	}
	if a.cfg.Audit.Retention.Duration > 0 {
		ac.Retention.MaxAge = a.cfg.Audit.Retention.Duration
	}
	p, err := audit.NewPipeline(ac)
	if err != nil {
		return err
	}
	a.pipeline = p // closed last, in Close
	a.metrics = newMetrics(p.Stats)
	a.tap = newTap(p, a.metrics)
	return nil
}

func (a *Appliance) startCA(context.Context) error {
	ca, err := certs.Open(a.cfg.StateDir) // where `airlock ca export` looks
	if err != nil {
		return err
	}
	a.ca = ca
	return nil
}

func (a *Appliance) startPolicies(context.Context) error {
	op, err := operator(a.cfg)
	if err != nil {
		return err
	}
	ps, err := newPolicySet(a.cfg.PolicyDir, op, a.tap)
	if err != nil {
		return err
	}
	if a.cfg.DefaultPolicy != "" {
		if _, ok := ps.Get(a.cfg.DefaultPolicy); !ok {
			return fmt.Errorf("default_policy %q: no %s.toml in %s", a.cfg.DefaultPolicy, a.cfg.DefaultPolicy, a.cfg.PolicyDir)
		}
	}
	a.policies = ps
	a.tap.enrich = a.enrich
	return nil
}

// enrich adds the policy hash to lifecycle records (the runner knows the
// policy's name only): a reviewer sees which version governed the sandbox.
func (a *Appliance) enrich(e *audit.Event) {
	l := e.Lifecycle
	if e.Kind != audit.KindLifecycle || l == nil || l.Policy == "" || l.PolicyHash != "" {
		return
	}
	if ref, ok := a.policies.Get(l.Policy); ok {
		cp := *l // the producer owns *l
		cp.PolicyHash = ref.load().Hash()
		e.Lifecycle = &cp
	}
}

func (a *Appliance) startSecrets(context.Context) error {
	s, err := loadSecrets(a.cfg.Secrets.File)
	if err != nil {
		return err
	}
	a.secrets = s
	a.registry = NewRegistry()
	if a.sbLocks, err = openSandboxLocks(filepath.Join(a.cfg.StateDir, "lockfiles"), a.log); err != nil {
		return err
	}
	a.registry.SetLocks(a.sbLocks)
	a.approvals = newApprovals(a.tap, a.cfg.Approval.Timeout.Duration, a.tap.Running)
	return nil
}

func (a *Appliance) startPath(context.Context) error {
	if err := bpf.Probe(); err != nil {
		return err
	}
	p, err := bpf.Open(a.opts.PinDir, bpf.Options{Logger: a.log.With("component", "bpf"), Guard: hostGuard(a.opts),
		ProcSys: a.opts.ProcSys})
	if err != nil {
		return err
	}
	a.path = p
	a.onClose(p.Close) // pins, links and guards stay: fail closed
	return nil
}

func (a *Appliance) gatewayPort(port uint16) string {
	return netip.AddrPortFrom(a.cfg.Network.Gateway, port).String()
}

func (a *Appliance) startDNS(bg context.Context) error {
	udp, err := tproxy.ListenUDP(bg, a.gatewayPort(a.cfg.Listen.DNS))
	if err != nil {
		return err
	}
	tcp, err := tproxy.ListenTCP(bg, a.gatewayPort(a.cfg.Listen.DNS))
	if err != nil {
		udp.Close()
		return err
	}
	ups := make([]dnsd.Upstream, 0, len(a.cfg.Upstream.Resolvers))
	for _, r := range a.cfg.Upstream.Resolvers {
		ups = append(ups, dnsd.Upstream{Addr: r.String()})
	}
	srv, err := dnsd.New(dnsd.Config{
		PacketConns: []net.PacketConn{udp}, Listeners: []net.Listener{tcp},
		Identifier: a.registry.DNSIdentifier(), Emitter: a.tap, Upstreams: ups,
		Logger: a.log.With("component", "dnsd"), Attributor: a.attrib,
	})
	if err != nil {
		udp.Close()
		tcp.Close()
		return err
	}
	a.dns = srv
	a.onClose(srv.Close)
	if err := a.path.SetDNSSockets(udp, tcp); err != nil {
		return err
	}
	a.goRun("dnsd", func() error { return srv.Serve(bg) })
	return nil
}

func (a *Appliance) startProxy(ctx context.Context) error {
	extra, err := readCAFiles(a.cfg.Upstream.CAFiles)
	if err != nil {
		return err
	}
	tl, err := tproxy.ListenTCP(ctx, a.gatewayPort(a.cfg.Listen.ProxyTransparent))
	if err != nil {
		return err
	}
	el, err := tproxy.ListenTCP(ctx, a.gatewayPort(a.cfg.Listen.ProxyExplicit))
	if err != nil {
		tl.Close()
		return err
	}
	a.advisory = &advisories{dirs: a.cfg.Packages.OSV, log: a.log}
	if err := a.advisory.load(); err != nil {
		tl.Close()
		el.Close()
		return err
	}
	if a.pcache, err = a.openPackageCache(); err != nil {
		tl.Close()
		el.Close()
		return err
	}
	if pc := a.pcache; pc != nil {
		a.onClose(pc.Close)
	}
	p, err := proxy.New(proxy.Config{
		CA: a.ca, Identify: a.registry.ProxyIdentifier(), Resolver: a.resolver(), Emitter: a.tap,
		Logger: a.log.With("component", "proxy"), Bindings: a.dns.Bindings(), Secrets: a.secrets,
		Approver: a.approvals, Attributor: a.attrib,
		Own: []netip.AddrPort{
			netip.AddrPortFrom(a.cfg.Network.Gateway, a.cfg.Listen.ProxyTransparent),
			netip.AddrPortFrom(a.cfg.Network.Gateway, a.cfg.Listen.ProxyExplicit),
			netip.AddrPortFrom(a.cfg.Network.Gateway, a.cfg.Listen.DNS),
		},
		ExtraCAPEM:   extra,
		AskTimeout:   a.cfg.Approval.Timeout.Duration,
		Advisories:   a.advisory,
		PackageCache: a.pcache,
	})
	if err != nil {
		tl.Close()
		el.Close()
		return err
	}
	a.proxy = p
	a.onClose(func() error { tl.Close(); el.Close(); return p.Close() })
	if err := a.path.SetProxyListener(tl); err != nil {
		return err
	}
	if err := a.path.SetExplicitProxyListener(el); err != nil {
		return err
	}
	a.goRun("proxy transparent", func() error { return p.ServeTransparent(tl) })
	a.goRun("proxy explicit", func() error { return p.ServeExplicit(el) })
	return nil
}

// resolver is the appliance's own resolver for upstream names: the
// configured resolvers, never the host's.
func (a *Appliance) resolver() *net.Resolver {
	servers := a.cfg.Upstream.Resolvers
	var next uint32
	var mu sync.Mutex
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		mu.Lock()
		s := servers[int(next)%len(servers)]
		next++
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, network, s.String())
	}}
}

func readCAFiles(files []string) ([][]byte, error) {
	var out [][]byte
	for _, f := range files {
		b, err := safefile.Read(f, MaxCAFile)
		if err != nil {
			return nil, fmt.Errorf("upstream.ca_files: %w", err)
		}
		out = append(out, b)
	}
	return out, nil
}

func (a *Appliance) startRunner(ctx context.Context) error {
	eng, closer, err := a.opts.NewEngine(ctx, a.cfg, a.log.With("component", "engine"))
	if err != nil {
		return err
	}
	if closer != nil {
		a.engineC = closer
		a.onClose(closer.Close)
	}
	r, err := runner.New(runner.Config{
		Engine: eng, Emitter: a.tap, Logger: a.log.With("component", "runner"),
		Instance: a.opts.Instance, StateDir: a.runtimeDir(),
		Protected:   []string{a.cfg.StateDir, filepath.Dir(a.cfg.Audit.Store), a.cfg.PolicyDir},
		SandboxUser: a.cfg.Podman.User, Pool: a.cfg.Network.Pool, Gateway: a.cfg.Network.Gateway,
		AttachNetwork: a.attach, CACertPEM: a.ca.CertPEM(),
		ProxyURL:     "http://" + a.gatewayPort(a.cfg.Listen.ProxyExplicit),
		ExecTimeout:  a.cfg.Sandbox.ExecTimeout.Duration,
		MaxFileBytes: a.cfg.runnerMaxFile(),
		SecretValues: a.secrets.secretValues,
		ArtifactDir:  filepath.Join(a.cfg.StateDir, "artifacts", a.opts.Instance),
		TemplateDir:  filepath.Join(a.cfg.StateDir, "templates"),
		Artifacts:    a.cfg.Artifacts.runner(),
		ArtifactHook: a.writeReport,
		AgentBinary:  a.opts.AgentBinary,
		BlockNetwork: a.blockPause,
	})
	if err != nil {
		return err
	}
	a.runner = r
	a.attrib.setRunner(r)
	a.onClose(r.Close)
	a.metrics.sandboxCount(func() float64 { return float64(len(r.List())) })
	return nil
}

// runnerMaxFile is sandbox.max_file_mb in bytes (0: the runner's default).
func (c *Config) runnerMaxFile() int64 { return c.Sandbox.MaxFileMB << 20 }

// attach is the runner's network hook: the kernel path on the host end of
// the sandbox's veth, and the sandbox in the registry so dnsd and the proxy
// know it. It runs before the veth's peer moves into the sandbox.
func (a *Appliance) attach(ifindex int, n runner.SandboxNet) (func() error, error) {
	if n.Unbound { // a warm member: the path with no identity, nothing registered
		h, err := a.path.AttachUnbound(ifindex, n.SandboxID)
		if err != nil {
			return nil, err
		}
		return func() error { return a.path.Detach(h) }, nil
	}
	ref, ok := a.policies.Get(n.Policy)
	if !ok {
		return nil, fmt.Errorf("policy %q is not loaded", n.Policy)
	}
	h, err := a.path.Attach(ifindex, bpf.SandboxNet{
		Sandbox: bpf.SandboxID{Num: a.addrNum(n.Addr), Name: n.SandboxID},
		Addr:    n.Addr, MAC: n.MAC, Gateway: n.Gateway, ProxyPort: a.cfg.Listen.ProxyExplicit,
	})
	if err != nil {
		return nil, err
	}
	a.registry.Add(n.SandboxID, n.Addr, ref)
	a.mu.Lock()
	a.handles[n.SandboxID] = h
	a.mu.Unlock()
	id := n.SandboxID
	return func() error {
		if !a.isResetting(id) {
			a.registry.Remove(id)
			a.secrets.Forget(id)
			a.approvals.Forget(id)
		}
		a.mu.Lock()
		delete(a.handles, id)
		a.mu.Unlock()
		return a.path.Detach(h)
	}, nil
}

// addrNum keys the kernel's per-sandbox counters: the address's offset
// in the pool — unique among live sandboxes, never zero for a host
// address, and below 4096 (the config allows pools up to /20).
func (a *Appliance) addrNum(addr netip.Addr) uint32 {
	return addrU32(addr) - addrU32(a.cfg.Network.Pool.Masked().Addr())
}

func addrU32(a netip.Addr) uint32 {
	b := a.Unmap().As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// reconcile adopts the sandboxes a previous appliance left running (their
// network hook runs again and re-registers them), removes what is broken,
// then drops kernel attachments no live sandbox owns.
func (a *Appliance) reconcile(ctx context.Context) error {
	rep, err := a.runner.Reconcile(ctx)
	if err != nil {
		return err
	}
	a.reconcil = rep
	a.sbLocks.prune(func(id string) bool { _, err := a.runner.Get(id); return err == nil })
	a.runner.Watch(0)
	var live []int
	for _, sb := range a.runner.List() {
		if ifi, err := net.InterfaceByName(sb.HostIf); err == nil {
			live = append(live, ifi.Index)
		}
	}
	live = append(live, a.nodeLive()...)
	removed, err := a.path.Reconcile(live)
	if err != nil {
		return fmt.Errorf("kernel path: %w", err)
	}
	if len(rep.Adopted)+len(rep.Removed)+len(rep.Veths)+len(rep.Finished)+len(removed) > 0 {
		a.log.Info("reconciled", "adopted", rep.Adopted, "removed", rep.Removed, "veths", rep.Veths,
			"finished", rep.Finished, "stale_attachments", len(removed))
	}
	return nil
}

func (a *Appliance) startDrops(bg context.Context) error {
	ch, err := a.path.Events(bg)
	if err != nil {
		return err
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for d := range ch {
			a.tap.Emit(bpf.AuditEvent(d))
		}
	}()
	return nil
}

func (a *Appliance) goRun(name string, f func() error) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := f(); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, context.Canceled) {
			a.log.Error("component stopped", "component", name, "err", err)
		}
	}()
}

// Serve runs the control API (unix socket, optional TCP) and the metrics
// endpoint until ctx ends, then shuts them down gracefully.
func (a *Appliance) Serve(ctx context.Context) error {
	api, err := a.controlAPI()
	if err != nil {
		return err
	}
	ul, err := ListenUnix(a.cfg.Control.Socket, a.cfg.Control.Group)
	if err != nil {
		return err
	}
	servers := []*http.Server{NewHTTPServer(api.Handler())}
	listeners := []net.Listener{ul}
	if a.cfg.Control.TCP.IsValid() {
		srv, tl, err := a.listenControlTCP(api)
		if err != nil {
			ul.Close()
			return err
		}
		servers = append(servers, srv)
		listeners = append(listeners, tl)
	}
	if m := a.cfg.Metrics.Listen; m.IsValid() {
		ml, err := net.Listen("tcp", m.String())
		if err != nil {
			closeAll(listeners)
			return fmt.Errorf("metrics: %w", err)
		}
		servers = append(servers, &http.Server{Handler: a.metrics.Handler(), ReadHeaderTimeout: 10 * time.Second})
		listeners = append(listeners, ml)
	}
	errc := make(chan error, len(servers))
	for i := range servers {
		go func() { errc <- servers[i].Serve(listeners[i]) }()
	}
	a.log.Info("airlock serve ready", "socket", a.cfg.Control.Socket, "sandboxes", len(a.runner.List()),
		"adopted", len(a.reconcil.Adopted))
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(sctx)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func closeAll(ls []net.Listener) {
	for _, l := range ls {
		l.Close()
	}
}

// Close stops everything in reverse start order. Sandboxes keep running
// and keep their pinned path (which drops their traffic while no proxy
// and dnsd sockets are in it); the next appliance adopts them. Safe after
// a partial Start and more than once.
func (a *Appliance) Close() error {
	if a.cancel != nil {
		a.cancel()
	}
	var errs []error
	for i := len(a.closers) - 1; i >= 0; i-- {
		if err := a.closers[i](); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	a.closers = nil
	a.wg.Wait()
	if a.runner != nil && len(a.runner.List()) == 0 {
		// No sandbox left to adopt: its runtime files can go.
		errs = append(errs, os.RemoveAll(filepath.Dir(a.runtimeDir())))
	}
	if a.pipeline != nil {
		errs = append(errs, a.pipeline.Close())
		a.pipeline = nil
	}
	return errors.Join(errs...)
}

// ReloadOnSIGHUP reloads the policy directory on every SIGHUP until ctx
// ends.
func (a *Appliance) ReloadOnSIGHUP(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := a.Reload("SIGHUP"); err != nil {
					a.log.Error("policy reload", "err", err)
				}
				_ = a.principals.Load().Reload("SIGHUP") // logs what it kept and why
			}
		}
	}()
}

// Reload re-reads the policy directory (SIGHUP or the API).
func (a *Appliance) Reload(by string) error {
	res, err := a.ReloadPolicies(context.Background(), by)
	if err != nil {
		return err
	}
	for _, r := range res.Rejected {
		a.log.Warn("policy rejected; the running version stays", "policy", r.Name, "errors", r.Errors)
	}
	for _, r := range res.Reloaded {
		a.log.Info("policy reloaded", "policy", r.Name, "old_hash", r.OldHash, "new_hash", r.NewHash)
	}
	return nil
}

// Config returns the appliance's configuration.
func (a *Appliance) Config() *Config { return a.cfg }
