//go:build remote

// Integration tests of `airlock serve` through the real path: the kernel
// steering, dnsd, the proxy, rootless Podman sandboxes and a hermetic
// world in a network namespace (198.18.0.0/15) with its own CA. They need
// root, Podman and the sandbox images (make setup; make image), and skip
// with the reason otherwise. Build tag "remote": they import the Podman
// adapter (the Makefile passes the tags).
package serve_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"airlock/audit"
	"airlock/bpf"
	"airlock/client"
	"airlock/e2e/world"
	"airlock/runner"
	"airlock/serve"
)

const (
	sandboxUser  = "airlock-sandbox"
	debianImage  = "localhost/airlock/debian:12"
	busyboxImage = "localhost/airlock/busybox:1"
	helperEnv    = "AIRLOCK_SERVE_TEST_HELPER"
)

// TestMain doubles as `airlock serve` for the kill -9 test: with helperEnv
// set, this binary runs an appliance (serve.Start + Serve) until killed.
func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(runHelper(spec))
	}
	os.Exit(m.Run())
}

// helperSpec is how the test tells a helper process which appliance to be.
type helperSpec struct {
	config, instance, pinDir string
	table                    int
	agent                    string // airlock-init for the sandboxes; "": none
}

func (h helperSpec) String() string {
	return strings.Join([]string{h.config, h.instance, h.pinDir, strconv.Itoa(h.table), h.agent}, "|")
}

func parseHelper(s string) helperSpec {
	p := strings.Split(s, "|")
	n, _ := strconv.Atoi(p[3])
	return helperSpec{config: p[0], instance: p[1], pinDir: p[2], table: n, agent: p[4]}
}

func (h helperSpec) guard() bpf.GuardConfig {
	return bpf.GuardConfig{Table: h.table, RulePriority: h.table, NFTTable: "airlock-st-" + h.instance}
}

func runHelper(spec string) int {
	h := parseHelper(spec)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg, err := serve.Load(h.config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	app, err := serve.Start(ctx, cfg, serve.Options{Logger: log, Version: "test", NewEngine: serve.PodmanEngine,
		Instance: h.instance, PinDir: h.pinDir, Guard: h.guard(), AgentBinary: h.agent})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		return 1
	}
	app.ReloadOnSIGHUP(ctx)
	err = app.Serve(ctx)
	return map[bool]int{true: 0, false: 1}[errors.Join(err, app.Close()) == nil]
}

// lab is one test's world, Podman service and appliance files.
type lab struct {
	t       *testing.T
	w       *world.World
	dir     string
	spec    helperSpec
	socket  string
	c       *client.Client
	podman  string // the private Podman service's socket
	helper  *exec.Cmd
	logf    string
	pool    netip.Prefix
	gw      netip.Addr
	metrics string // loopback addr:port of the Prometheus endpoint
	extra   string // appended to the appliance config (writeFiles)
}

func requireLab(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (network namespaces, eBPF, Podman as the sandbox user)")
	}
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("skipping: podman is not installed (make setup)")
	}
	if _, err := user.Lookup(sandboxUser); err != nil {
		t.Skipf("skipping: no sandbox user %s (make setup)", sandboxUser)
	}
	if err := bpf.Probe(); err != nil {
		t.Skipf("skipping: kernel lacks a feature the path needs: %v", err)
	}
}

func newLab(t *testing.T, image string) *lab {
	requireLab(t)
	if !imageExists(image) {
		t.Skipf("skipping: the sandbox image %s is not built (make image)", image)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := world.Start(ctx, world.Options{})
	if err != nil {
		t.Fatalf("start the world: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	l := &lab{t: t, w: w}
	if l.dir, err = os.MkdirTemp("", "airlock-serve-test-"); err != nil {
		t.Fatal(err)
	}
	os.Chmod(l.dir, 0o711)
	t.Cleanup(func() { os.RemoveAll(l.dir) })
	l.spec = helperSpec{config: filepath.Join(l.dir, "airlock.toml"), instance: "st" + w.ID,
		pinDir: "/sys/fs/bpf/airlock-st-" + w.ID, table: 2000 + rand.IntN(900)}
	t.Cleanup(l.teardownPath)
	l.socket = filepath.Join(l.dir, "airlock.sock")
	l.c = client.New(l.socket)
	l.startPodman()
	if err := l.pickPool(); err != nil {
		t.Fatal(err)
	}
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.metrics = ml.Addr().String()
	ml.Close()
	l.writeFiles()
	return l
}

func imageExists(ref string) bool {
	u, err := user.Lookup(sandboxUser)
	if err != nil {
		return false
	}
	cmd := exec.Command("runuser", "-u", sandboxUser, "--", "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME="+u.HomeDir, "XDG_RUNTIME_DIR=/run/user/"+u.Uid, "podman", "image", "exists", ref)
	cmd.Dir = "/"
	return cmd.Run() == nil
}

// startPodman starts a Podman service of the sandbox user on a socket of
// this test's own, and stops it (by PID) at the end.
func (l *lab) startPodman() {
	t := l.t
	u, err := user.Lookup(sandboxUser)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	run := "/run/user/" + u.Uid
	for _, d := range []string{run, run + "/podman"} {
		os.MkdirAll(d, 0o700)
		os.Chown(d, uid, gid)
	}
	l.podman = filepath.Join(run, "podman", "airlock-st-"+l.w.ID+".sock")
	logf, err := os.Create(filepath.Join(l.dir, "podman.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("podman", "system", "service", "--time=0", "unix://"+l.podman)
	cmd.Dir = u.HomeDir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + u.HomeDir, "USER=" + u.Username,
		"XDG_RUNTIME_DIR=" + run}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start podman service: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		os.Remove(l.podman)
	})
	waitFor(t, 30*time.Second, "the podman service socket", func() bool {
		c, err := net.Dial("unix", l.podman)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// pickPool chooses a /24 in 198.19.128.0/17 no address or route overlaps.
func (l *lab) pickPool() error {
	routes, _ := netlink.RouteList(nil, netlink.FAMILY_V4)
	addrs, _ := netlink.AddrList(nil, netlink.FAMILY_V4)
	used := func(p netip.Prefix) bool {
		for _, r := range routes {
			if r.Dst != nil && !r.Dst.IP.IsUnspecified() {
				if a, ok := netip.AddrFromSlice(r.Dst.IP); ok && p.Contains(a.Unmap()) {
					return true
				}
			}
		}
		for _, ad := range addrs {
			if ip, ok := netip.AddrFromSlice(ad.IP); ok && p.Contains(ip.Unmap()) {
				return true
			}
		}
		return p.Overlaps(l.w.Prefix)
	}
	for range 64 {
		third := byte(128 + rand.IntN(120))
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, third, 0}), 24)
		if !used(p) {
			l.pool, l.gw = p, netip.AddrFrom4([4]byte{198, 19, third, 1})
			return nil
		}
	}
	return errors.New("no free sandbox pool in 198.19.128.0/17")
}

// testPolicy allows the world's registry and git by name only: the world's
// addresses are non-public (198.18.0.0/15) and reachable only because the
// appliance config names the world's prefix in upstream.allow.
func (l *lab) testPolicy() string {
	return fmt.Sprintf(`version = 1
mode = "enforce"

[deny]
hosts = [%q]

[categories.registries]
hosts = [%q]

[categories.git]
hosts = [%q]
push = false
`, l.w.Name(world.RoleEvil), l.w.Name(world.RoleNPM), l.w.Name(world.RoleGit))
}

func (l *lab) writeFiles() {
	state, runtime := filepath.Join(l.dir, "state"), filepath.Join(l.dir, "run")
	os.MkdirAll(filepath.Join(l.dir, "policies"), 0o700)
	os.Mkdir(state, 0o755) // an existing state_dir is tightened (stateModes)
	cfg := fmt.Sprintf(`version = 1
state_dir = %q
runtime_dir = %q
policy_dir = %q
default_policy = "lab"

[network]
pool = "%s"
gateway = "%s"

[control]
socket = %q
group = ""

[upstream]
resolvers = ["%s"]
allow = ["%s"]
ca_files = [%q]

[audit]
jsonl = %q

[podman]
user = %q
socket = %q

[metrics]
listen = "%s"

[sandbox]
exec_timeout = "2m"
lifetime = "20m"
max = 24
%s`, state, runtime, filepath.Join(l.dir, "policies"), l.pool, l.gw, l.socket, l.w.DNSAddr(), l.w.Prefix,
		l.w.CAFile, filepath.Join(l.dir, "events.jsonl"), sandboxUser, l.podman, l.metrics, l.extra)
	for name, body := range map[string]string{"airlock.toml": cfg, "policies/lab.toml": l.testPolicy()} {
		if err := os.WriteFile(filepath.Join(l.dir, name), []byte(body), 0o600); err != nil {
			l.t.Fatal(err)
		}
	}
}

// startServe runs the appliance as a helper process and waits until its
// API answers.
// startServe starts the lab's appliance unless it is running already (a
// second one on the same store is refused: TestStoreLock).
func (l *lab) startServe() {
	t := l.t
	if l.helper != nil && l.helper.ProcessState == nil && l.helper.Process.Signal(syscall.Signal(0)) == nil {
		return
	}
	l.logf = filepath.Join(l.dir, "serve.log")
	logf, err := os.OpenFile(l.logf, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+l.spec.String())
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l.helper = cmd
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	t.Cleanup(func() { l.stopServe(cmd, exited) })
	waitFor(t, 90*time.Second, "the appliance's API", func() bool {
		select {
		case <-exited:
			t.Fatalf("airlock serve exited during start:\n%s", l.tail(30))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := l.c.Health(ctx)
		return err == nil
	})
}

// stopServe stops the appliance cmd (the one its startServe started, not
// whichever l.helper names by now: a later start would otherwise leave
// this one running after the test).
func (l *lab) stopServe(cmd *exec.Cmd, exited chan struct{}) {
	select {
	case <-exited:
		return
	default:
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
}

// ensureServe starts the appliance again when an earlier step's restart
// ended with that step (startServe stops it at the end of the test that
// started it).
func (l *lab) ensureServe() {
	if l.helper == nil || l.helper.ProcessState != nil {
		l.startServe()
	}
}

// kill9 kills the appliance the way a crash would.
func (l *lab) kill9() {
	l.helper.Process.Kill()
	for l.helper.ProcessState == nil {
		time.Sleep(10 * time.Millisecond)
	}
}

func (l *lab) tail(n int) string {
	b, _ := os.ReadFile(l.logf)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// teardownPath removes the pins and host guards the appliance leaves on
// purpose (fail closed), and any container of this test's instance.
func (l *lab) teardownPath() {
	if _, err := os.Stat(l.spec.pinDir); err == nil {
		g := l.spec.guard()
		g.IfacePrefix = runner.VethPrefix
		if p, err := bpf.Reopen(l.spec.pinDir, bpf.Options{Guard: g}); err == nil {
			if err := p.Teardown(); err != nil {
				l.t.Errorf("tear down the kernel path: %v", err)
			}
		}
		os.RemoveAll(l.spec.pinDir)
	}
}

func (l *lab) create(image string) client.Sandbox {
	t := l.t
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := l.c.Create(ctx, client.CreateRequest{Image: image})
	if err != nil {
		t.Fatalf("create sandbox: %v\n%s", err, l.tail(20))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := l.c.Delete(ctx, sb.ID); err != nil && !client.IsCode(err, client.CodeNotFound) {
			// The API may be down (a failed kill -9 test): remove the container directly.
			exec.Command("podman", "--remote", "--url", "unix://"+l.podman, "rm", "-f", runner.ContainerName(sb.ID)).Run()
		}
	})
	return sb
}

type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
}

func (l *lab) exec(id, script string) result {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	res, err := l.c.Exec(ctx, id, client.ExecRequest{Argv: []string{"sh", "-c", script}}, &out, &errb)
	if err != nil {
		l.t.Fatalf("exec %q: %v\n%s", script, err, l.tail(20))
	}
	return result{res.ExitCode, out.String(), errb.String()}
}

func (l *lab) events(id string) []audit.Event {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var evs []audit.Event
	if err := l.c.Logs(ctx, client.LogQuery{Sandbox: id}, func(e audit.Event) error {
		evs = append(evs, e)
		return nil
	}); err != nil {
		l.t.Fatalf("logs: %v", err)
	}
	return evs
}

func findEvent(evs []audit.Event, f func(audit.Event) bool) (audit.Event, bool) {
	for _, e := range evs {
		if f(e) {
			return e, true
		}
	}
	return audit.Event{}, false
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

const curlOpts = "curl -sS --max-time 20 "

// TestServe runs one appliance (as a separate process, like `airlock
// serve`) for a world and a Debian sandbox, and checks the real path and
// then recovery from kill -9. The steps share the lab: setting one up
// (world, Podman service, appliance, sandbox) is most of the cost.
func TestServe(t *testing.T) {
	start := time.Now()
	l := newLab(t, debianImage)
	l.startServe()
	sb := l.create(debianImage)
	t.Logf("lab ready in %s", time.Since(start).Round(time.Millisecond))
	if !t.Run("real path", func(t *testing.T) { l.t = t; realPath(t, l, sb) }) {
		return
	}
	t.Run("metrics", func(t *testing.T) { l.t = t; metrics(t, l) })
	t.Run("policy reload", func(t *testing.T) { l.t = t; reload(t, l, sb) })
	t.Run("deny cidr inside upstream.allow", func(t *testing.T) { l.t = t; denyCIDRInLab(t, l, sb) })
	t.Run("state modes", func(t *testing.T) { l.t = t; stateModes(t, l) })
	t.Run("mac spoof", func(t *testing.T) { l.t = t; macSpoof(t, l) })
	t.Run("lockdown", func(t *testing.T) { l.t = t; lockdownInLab(t, l, sb) })
	t.Run("kill -9 recovery", func(t *testing.T) { l.t = t; kill9Recovery(t, l, sb) })
	t.Run("reset", func(t *testing.T) { l.t = t; resetInLab(t, l, sb) })
	t.Run("template", func(t *testing.T) { l.t = t; templateInLab(t, l) })
	t.Run("artifacts after kill -9", func(t *testing.T) { l.t = t; artifactsAfterKill9(t, l) })
	t.Run("irregular policy files", func(t *testing.T) { l.t = t; irregularPolicies(t, l) })
}

// metrics: the loopback endpoint counts what the real path just did.
func metrics(t *testing.T, l *lab) {
	resp, err := http.Get("http://" + l.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, re := range []string{
		`airlock_decisions_total\{category="registries",kind="flow",verdict="allow"\} [1-9]`,
		`airlock_dns_queries_total\{rcode="NXDOMAIN",verdict="deny"\} [1-9]`,
		`airlock_sandboxes 1`,
		`airlock_exec_duration_seconds_count\{outcome="exited"\} [1-9]`,
		`airlock_audit_queue_depth \d`,
		`airlock_audit_dropped_total 0`,
	} {
		if !regexp.MustCompile(re).Match(body) {
			t.Errorf("metrics lack %s", re)
		}
	}
}

// reload: a broken policy file is rejected with its errors and the running
// policy stays; a valid one (here by SIGHUP) replaces it for the running
// sandbox; both are policy events with the hashes.
func reload(t *testing.T, l *lab, sb client.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	git := "https://" + l.w.Name(world.RoleGit) + "/"
	status := func() string {
		return l.exec(sb.ID, curlOpts+"-o /dev/null -w '%{http_code}' "+git+" 2>/dev/null; true").stdout
	}
	if s := status(); s == "403" || s == "000" {
		t.Fatalf("git is refused before the reload: %s", s)
	}
	pol := filepath.Join(l.dir, "policies", "lab.toml")
	good, _ := os.ReadFile(pol)
	os.WriteFile(pol, append(append([]byte{}, good...), "\n[categories.oops]\nhosts = [\"*bad*.test\"]\n"...), 0o600)
	res, err := l.c.ReloadPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rejected) != 1 || len(res.Rejected[0].Errors) == 0 || !strings.Contains(res.Rejected[0].Errors[0], "lab.toml:") {
		t.Fatalf("broken file: %+v, want it rejected with positioned errors", res)
	}
	if s := status(); s == "403" || s == "000" {
		t.Errorf("after a rejected reload git is refused (%s): the broken file replaced the policy", s)
	}
	// Without the git category, by SIGHUP.
	os.WriteFile(pol, []byte(fmt.Sprintf("version = 1\n[categories.registries]\nhosts = [%q]\n", l.w.Name(world.RoleNPM))), 0o600)
	old := policyHash(t, l)
	l.helper.Process.Signal(syscall.SIGHUP)
	waitFor(t, 30*time.Second, "the SIGHUP reload", func() bool { return policyHash(t, l) != old })
	if r := l.exec(sb.ID, curlOpts+"-v -o /dev/null "+git+" 2>&1"); !strings.Contains(r.stdout, "403") {
		t.Errorf("after the reload git is not refused with the proxy's 403:\n%s\n%s", r, l.tail(10))
	}
	var actions []string
	for _, e := range l.events("") {
		if e.Kind == audit.KindPolicy && e.Policy.Name == "lab" {
			actions = append(actions, e.Policy.Action)
			if e.Policy.Action == "reloaded" && (e.Policy.OldHash != old || e.Policy.NewHash == "" || !strings.Contains(e.Reason, "SIGHUP")) {
				t.Errorf("reload event %+v, want old hash %s, a new hash and SIGHUP as the cause", e.Policy, old)
			}
		}
	}
	if got := strings.Join(actions, ","); got != "loaded,rejected,reloaded" {
		t.Errorf("policy events = %s, want loaded,rejected,reloaded", got)
	}
	// Put git back for the recovery test.
	os.WriteFile(pol, []byte(l.testPolicy()), 0o600)
	if _, err := l.c.ReloadPolicies(ctx); err != nil {
		t.Fatal(err)
	}
}

// denyCIDRInLab: with upstream.allow holding the world's range and the
// policy's [deny] cidrs naming the registry's address, the allowed
// registry name is refused through the explicit proxy (403) and the
// transparent path, the world's registry serves nothing, and dnsd's
// answer for the name drops the address (docs/policy.md: a [deny] cidr is
// denied whatever any category says).
func denyCIDRInLab(t *testing.T, l *lab, sb client.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	npm, addr := l.w.Name(world.RoleNPM), l.w.Addr(world.RoleNPM).String()
	pol := filepath.Join(l.dir, "policies", "lab.toml")
	t.Cleanup(func() { // the recovery test that follows needs the lab policy back
		os.WriteFile(pol, []byte(l.testPolicy()), 0o600)
		if _, err := l.c.ReloadPolicies(context.Background()); err != nil {
			t.Errorf("restore the policy: %v", err)
		}
	})
	os.WriteFile(pol, []byte(strings.Replace(l.testPolicy(), "[deny]\n", fmt.Sprintf("[deny]\ncidrs = [%q]\n", addr), 1)), 0o600)
	if res, err := l.c.ReloadPolicies(ctx); err != nil || len(res.Reloaded) != 1 {
		t.Fatalf("reload with the [deny] cidr: %+v, %v", res, err)
	}
	mark := l.w.Mark()
	if r := l.exec(sb.ID, curlOpts+"-v -o /dev/null https://"+npm+"/airlock-demo 2>&1"); r.code == 0 || !strings.Contains(r.stdout, "403") {
		t.Errorf("explicit proxy: want the CONNECT refused with 403:\n%v", r)
	}
	if r := l.exec(sb.ID, curlOpts+"--noproxy '*' -o /dev/null -w '%{http_code}' https://"+npm+"/airlock-demo"); r.code == 0 {
		t.Errorf("transparent path: the request succeeded: %v", r)
	}
	if r := l.exec(sb.ID, "getent ahostsv4 "+npm+"; echo rc=$?"); strings.Contains(r.stdout, addr) {
		t.Errorf("dnsd answered the [deny]ed address: %v", r)
	}
	if got := l.w.Since(mark, world.ByRole(world.RoleNPM)); len(got) != 0 {
		t.Errorf("the world's registry served %d request(s) for a [deny]ed address", len(got))
	}
	evs := l.events(sb.ID)
	if _, ok := findEvent(evs, func(e audit.Event) bool {
		return e.Kind == audit.KindDNS && audit.Host(&e) == npm && slices.Contains(e.DNS.Stripped, addr) && strings.Contains(e.Reason, "deny.cidrs[0]")
	}); !ok {
		t.Errorf("no dns event stripping %s under deny.cidrs[0]", addr)
	}
	if _, ok := findEvent(evs, func(e audit.Event) bool {
		return e.Verdict == "deny" && audit.Host(&e) == npm && e.Rule == "proxy.address" && strings.Contains(e.Reason, "deny.cidrs[0]")
	}); !ok {
		t.Errorf("no proxy denial of %s naming deny.cidrs[0]", npm)
	}
}

func policyHash(t *testing.T, l *lab) string {
	ps, err := l.c.Policies(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Name == "lab" {
			return p.Hash
		}
	}
	return ""
}

// realPath: HTTPS to an allowed world server works with the appliance CA
// trusted by default; a denied host gets the proxy's 403 naming the rule;
// a denied name is NXDOMAIN; a direct connection to an IP that ignores the
// proxy settings is still caught; each is in the audit log with the
// sandbox id.
func realPath(t *testing.T, l *lab, sb client.Sandbox) {
	npm, evil := l.w.Name(world.RoleNPM), l.w.Name(world.RoleEvil)

	mark := l.w.Mark()
	r := l.exec(sb.ID, curlOpts+"-o /dev/null -w '%{http_code}' https://"+npm+"/airlock-demo")
	if r.code != 0 || r.stdout != "200" {
		t.Fatalf("allowed HTTPS through the explicit proxy: %v\n%s", r, l.tail(20))
	}
	r = l.exec(sb.ID, curlOpts+"--noproxy '*' -o /dev/null -w '%{http_code}' https://"+npm+"/airlock-demo")
	if r.code != 0 || r.stdout != "200" {
		t.Fatalf("allowed HTTPS through the transparent path: %v", r)
	}
	if got := l.w.Since(mark, world.ByRole(world.RoleNPM)); len(got) == 0 {
		t.Error("the world's registry recorded no request")
	}

	// A denied host: the proxy answers CONNECT with 403 and names the rule.
	r = l.exec(sb.ID, curlOpts+"-v https://"+evil+"/ 2>&1")
	if r.code == 0 || !strings.Contains(r.stdout, "403") || !strings.Contains(r.stdout, "deny.hosts[0]") {
		t.Errorf("denied host: want a 403 naming deny.hosts[0]:\n%v", r)
	}
	// A denied name does not resolve.
	r = l.exec(sb.ID, "getent hosts "+evil+"; echo rc=$?")
	if !strings.Contains(r.stdout, "rc=2") {
		t.Errorf("denied name resolved: %v", r)
	}
	// Ignoring the proxy settings and the resolver: still caught.
	emark := l.w.Mark()
	r = l.exec(sb.ID, curlOpts+"--noproxy '*' -k https://"+l.w.Addr(world.RoleEvil).String()+"/")
	if r.code == 0 {
		t.Errorf("direct HTTPS to the evil server's IP succeeded: %v", r)
	}
	if leaks := l.w.Since(emark, world.ByRole(world.RoleEvil)); len(leaks) > 0 {
		t.Errorf("the evil server saw %d connection(s)", len(leaks))
	}

	evs := l.events(sb.ID)
	checks := []struct {
		what string
		f    func(audit.Event) bool
	}{
		{"an allowed flow to the registry", func(e audit.Event) bool {
			return e.Kind == audit.KindFlow && e.Verdict == "allow" && audit.Host(&e) == npm
		}},
		{"a denial of the evil host naming deny.hosts[0]", func(e audit.Event) bool {
			return e.Verdict == "deny" && audit.Host(&e) == evil && strings.HasPrefix(e.Rule, "deny.hosts[0]") && e.Kind != audit.KindDNS
		}},
		{"an NXDOMAIN for the evil name", func(e audit.Event) bool {
			return e.Kind == audit.KindDNS && e.Verdict == "deny" && audit.Host(&e) == evil && e.DNS.RCode == "NXDOMAIN"
		}},
		{"a denied flow to the evil server's address", func(e audit.Event) bool {
			return e.Kind == audit.KindFlow && e.Verdict == "deny" && e.Flow != nil &&
				strings.HasPrefix(e.Flow.OrigDst, l.w.Addr(world.RoleEvil).String()+":")
		}},
		{"the exec records", func(e audit.Event) bool { return e.Kind == audit.KindExec && e.Exec.Stage == "finished" }},
	}
	for _, c := range checks {
		if _, ok := findEvent(evs, c.f); !ok {
			t.Errorf("audit log of sandbox %s lacks %s", sb.ID, c.what)
		}
	}
	if t.Failed() {
		for _, e := range evs {
			t.Logf("event: %s %s %s %s rule=%q", e.Kind, e.Verdict, e.Category, audit.Host(&e), e.Rule)
		}
	}
}

// kill9Recovery kills the appliance with SIGKILL: the running sandbox
// loses the network (the world sees nothing of its attempts), and a
// restarted appliance adopts it and the network works again.
func kill9Recovery(t *testing.T, l *lab, sb client.Sandbox) {
	l.ensureServe() // the lockdown step's restarted appliance ended with it
	npm := l.w.Name(world.RoleNPM)
	url := "https://" + npm + "/airlock-demo"
	if r := l.exec(sb.ID, curlOpts+"--noproxy '*' -o /dev/null -w '%{http_code}' "+url); r.stdout != "200" {
		t.Fatalf("before the crash: %v", r)
	}

	l.kill9()
	mark := l.w.Mark()
	// The API is gone; run commands in the sandbox through Podman itself.
	inSandbox := func(script string) ([]byte, error) {
		return exec.Command("podman", "--remote", "--url", "unix://"+l.podman, "exec",
			runner.ContainerName(sb.ID), "sh", "-c", script).CombinedOutput()
	}
	if out, err := inSandbox("true"); err != nil {
		t.Fatalf("cannot run commands in the sandbox through Podman: %v\n%s", err, out)
	}
	npmAddr := l.w.Addr(world.RoleNPM).String()
	for _, script := range []string{
		curlOpts + "--max-time 5 --noproxy '*' --resolve " + npm + ":443:" + npmAddr + " " + url,
		curlOpts + "--max-time 5 " + url,
		"getent hosts " + npm,
	} {
		out, err := inSandbox(script)
		if err == nil {
			t.Errorf("with the appliance down, %q succeeded:\n%s", script, out)
		}
	}
	if got := l.w.Since(mark); len(got) > 0 {
		var s []string
		for _, r := range got {
			s = append(s, r.String())
		}
		t.Errorf("the world recorded traffic while the appliance was down:\n%s", strings.Join(s, "\n"))
	}

	l.startServe()
	got, err := l.c.Get(context.Background(), sb.ID)
	if err != nil {
		t.Fatalf("the restarted appliance does not know sandbox %s: %v\n%s", sb.ID, err, l.tail(30))
	}
	if got.Labels["adopted"] != "true" {
		t.Errorf("sandbox %+v not marked adopted", got)
	}
	if r := l.exec(sb.ID, curlOpts+"--noproxy '*' -o /dev/null -w '%{http_code}' "+url); r.stdout != "200" {
		t.Fatalf("after the restart: %v\n%s", r, l.tail(30))
	}
	if r := l.exec(sb.ID, curlOpts+"-o /dev/null -w '%{http_code}' "+url); r.stdout != "200" {
		t.Fatalf("after the restart, through the explicit proxy: %v", r)
	}
}
