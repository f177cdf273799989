package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"airlock/audit"
	"airlock/client"
	"airlock/e2e/world"
)

// The sandbox image with real clients (runner/images/build.sh builds it).
const debianImage = "localhost/airlock/debian:12"

// buildTags are the Makefile's: the Podman bindings need them.
const buildTags = "remote exclude_graphdriver_btrfs btrfs_noversion exclude_graphdriver_devicemapper containers_image_openpgp"

// probePath is where probe.py is copied into each sandbox.
const probePath = "/tmp/airlock-probe.py"

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildDir  string
)

// buildAirlock builds what `make build` puts in bin/, from this tree, once
// per test binary, and returns the CLI's path: airlock (the front users
// run, which runs sandbox exec itself and execs airlock-cli for the rest),
// airlock-cli (the thin build), airlockd (the whole appliance, which the
// CLI execs for serve, logs, report, policy, ...) and airlock-init (the in-sandbox agent
// the appliance finds beside its executable; warm pools need it). It may
// be started early in a goroutine so the build overlaps other work.
func buildAirlock() (string, error) {
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "airlock-e2e-bin-")
		if buildErr != nil {
			return
		}
		// The sandbox user's Podman bind-mounts airlock-init from here.
		if buildErr = os.Chmod(buildDir, 0o755); buildErr != nil {
			return
		}
		builtBin = filepath.Join(buildDir, "airlock")
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Dir(filepath.Dir(file))
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		for _, b := range []struct{ out, tags, pkg, cgo string }{
			{"airlockd", buildTags, "./cmd/airlock", "1"},
			{"airlock-cli", "airlock_thin", "./cmd/airlock", "0"},
			{"airlock", "", "./cmd/airlock-front", "0"},
			{"airlock-init", "", "./cmd/airlock-init", "0"},
		} {
			cmd := exec.CommandContext(ctx, "go", "build", "-tags", b.tags, "-o", filepath.Join(buildDir, b.out), b.pkg)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build -o %s %s: %v\n%s", b.out, b.pkg, err, out)
				return
			}
		}
	})
	return builtBin, buildErr
}

// airlockBinary is buildAirlock for a test: a failed build fails it.
func airlockBinary(t *testing.T) string {
	t.Helper()
	bin, err := buildAirlock()
	if err != nil {
		t.Fatalf("build airlock: %v", err)
	}
	return bin
}

// TestMain removes the built binary after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	if installRes != nil {
		os.RemoveAll(installRes.root)
	}
	os.Exit(code)
}

// requireAppliance skips unless everything the end-to-end tests drive is
// present: root, Podman and the sandbox user, and the Debian sandbox image.
// (The appliance itself is this tree's serve package, compiled in.)
func requireAppliance(t *testing.T) { requireServe(t, true) }

// requireServe is requireAppliance with the image check optional, for
// tests that start the appliance but no sandbox.
func requireServe(t *testing.T, image bool) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: the end-to-end suite needs root (network namespaces, eBPF, Podman); CI runs as root")
	}
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("skipping: podman is not installed (make setup)")
	}
	if _, err := userIDs("airlock-sandbox"); err != nil {
		t.Skipf("skipping: %v", err)
	}
	if !image {
		return
	}
	if err := imageExists(debianImage); err != nil {
		t.Skipf("skipping: the sandbox image %s is not built (make image): %v", debianImage, err)
	}
}

func imageExists(ref string) error {
	u, err := userIDs("airlock-sandbox")
	if err != nil {
		return err
	}
	cmd := exec.Command("runuser", "-u", "airlock-sandbox", "--", "env", "-i",
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME="+u.home, "XDG_RUNTIME_DIR=/run/user/"+u.uid,
		"podman", "image", "exists", ref)
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v %s", err, out)
	}
	return nil
}

type userInfo struct{ uid, home string }

func userIDs(name string) (userInfo, error) {
	out, err := exec.Command("getent", "passwd", name).Output()
	if err != nil {
		return userInfo{}, fmt.Errorf("user %s does not exist (make setup)", name)
	}
	f := strings.Split(strings.TrimSpace(string(out)), ":")
	if len(f) < 6 {
		return userInfo{}, fmt.Errorf("getent passwd %s: %q", name, out)
	}
	return userInfo{uid: f[2], home: f[5]}, nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

// appliance is a running `airlock serve` configured for a world.
type appliance struct {
	t       *testing.T
	dir     string
	config  string
	socket  string
	gateway netip.Addr
	pool    netip.Prefix
	ports   struct{ proxy, explicit, control, metrics uint16 }
	logFile string
	c       *client.Client
	w       *world.World
}

// startAppliance writes a config, the e2e policy and the secret store for
// w, starts `airlock serve` and waits until it is healthy. It is stopped
// (and its sandboxes removed) when the test ends.
func startAppliance(t *testing.T, w *world.World) *appliance {
	t.Helper()
	return startApplianceEdited(t, w, nil)
}

// startApplianceEdited is startAppliance with its config rewritten by edit
// (nil: as written).
func startApplianceEdited(t *testing.T, w *world.World, edit func(string) string) *appliance {
	t.Helper()
	requireServe(t, false)
	a := &appliance{t: t, w: w}
	var err error
	if a.dir, err = os.MkdirTemp("", "airlock-e2e-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(a.dir) })
	// The runner needs the sandbox user to reach into the state directory.
	if err := os.Chmod(a.dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := a.pickPool(); err != nil {
		t.Fatal(err)
	}
	if err := a.writeFiles(); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		cfg, err := os.ReadFile(a.config)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(a.config, []byte(edit(string(cfg))), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a.c = client.New(a.socket)
	a.start()
	return a
}

// pickPool chooses a sandbox pool in 198.18.128.0/17 that no route or
// address on the host overlaps (other engineers' tests run alongside).
func (a *appliance) pickPool() error {
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	used := func(p netip.Prefix) bool {
		for _, r := range routes {
			if r.Dst != nil && !r.Dst.IP.IsUnspecified() && r.Dst.Contains(net.IP(p.Addr().AsSlice())) {
				return true
			}
		}
		for _, ad := range addrs {
			if ip, ok := netip.AddrFromSlice(ad.IP); ok && p.Contains(ip.Unmap()) {
				return true
			}
		}
		return false
	}
	for range 32 {
		third := byte(128 + rand.IntN(120))
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, third, 0}), 24)
		if used(p) {
			continue
		}
		a.pool = p
		a.gateway = netip.AddrFrom4([4]byte{198, 18, third, 1})
		return nil
	}
	return errors.New("no free sandbox pool in 198.18.128.0/17")
}

func freePort() uint16 {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// upstreamAllow names the world's servers the policy uses (and its DNS),
// one /32 each — as a lab operator would — and not the whole world prefix:
// the evil server and the canary stay non-public and unreachable.
func (a *appliance) upstreamAllow() []string {
	var out []string
	for _, r := range []world.Role{world.RoleDNS, world.RoleNPM, world.RolePyPI, world.RoleGit, world.RoleAPI, world.RoleHooks} {
		out = append(out, netip.PrefixFrom(a.w.Addr(r), 32).String())
	}
	return out
}

func (a *appliance) writeFiles() error {
	a.socket = filepath.Join(a.dir, "airlock.sock")
	a.config = filepath.Join(a.dir, "airlock.toml")
	a.ports.proxy, a.ports.explicit = 15001, 3128
	a.ports.control, a.ports.metrics = freePort(), freePort()
	for _, d := range []string{"state", "policies", "osv"} {
		if err := os.MkdirAll(filepath.Join(a.dir, d), 0o700); err != nil {
			return err
		}
	}
	pol, err := RenderPolicy(AddrsOf(a.w))
	if err != nil {
		return err
	}
	files := map[string]string{
		"policies/" + PolicyName + ".toml":       string(pol),
		"secrets":                                "staging-token=" + a.w.APIToken + "\n",
		"osv/" + world.GatedAdvisoryID + ".json": world.GatedAdvisory,
		"token":                                  "e2e-control-token-" + a.w.ID + "\n",
		"airlock.toml": fmt.Sprintf(`version = 1
state_dir = %q
policy_dir = %q
default_policy = %q

[network]
pool = "%s"
gateway = "%s"

[listen]
proxy_transparent_port = %d
proxy_explicit_port = %d
dns_port = 53

[control]
socket = %q
group = "airlock"
tcp = "127.0.0.1:%d"
token_file = %q

[upstream]
resolvers = ["%s"]
allow = ["%s"]
ca_files = [%q]

[secrets]
file = %q

[audit]
jsonl = %q

[podman]
user = "airlock-sandbox"

[metrics]
listen = "127.0.0.1:%d"

[sandbox]
image = %q
exec_timeout = "3m"
lifetime = "30m"
max = 8

[packages]
osv = [%q]

[packages.cache]
max_mb = 256
`, filepath.Join(a.dir, "state"), filepath.Join(a.dir, "policies"), PolicyName,
			a.pool, a.gateway, a.ports.proxy, a.ports.explicit, a.socket, a.ports.control,
			filepath.Join(a.dir, "token"), a.w.DNSAddr(), strings.Join(a.upstreamAllow(), `", "`), a.w.CAFile,
			filepath.Join(a.dir, "secrets"), filepath.Join(a.dir, "events.jsonl"), a.ports.metrics, debianImage, filepath.Join(a.dir, "osv")),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(a.dir, name), []byte(body), 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (a *appliance) log() string {
	b, _ := os.ReadFile(a.logFile)
	return string(b)
}

func (a *appliance) tail(n int) string {
	lines := strings.Split(strings.TrimRight(a.log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// sandbox is a sandbox of the appliance.
type sandbox struct {
	a       *appliance
	id      string
	address netip.Addr
	caps    bool
}

// extraCaps are what the capability variant asks for in the sandbox's
// namespace.
var extraCaps = []string{"CAP_NET_RAW", "CAP_NET_ADMIN"}

// newSandbox creates a Debian sandbox under the e2e policy, copies the
// probe script in, and removes the sandbox when the test ends.
func (a *appliance) newSandbox(t *testing.T, caps bool, opts ...func(*client.CreateRequest)) *sandbox {
	t.Helper()
	req := client.CreateRequest{Image: debianImage, Policy: PolicyName,
		Labels: map[string]string{"airlock-e2e": a.w.ID}}
	if caps {
		req.CapAdd = extraCaps
	}
	for _, o := range opts {
		o(&req)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := a.c.Create(ctx, req)
	if err != nil {
		t.Fatalf("create sandbox: %v\n%s", err, a.tail(40))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := a.c.Delete(ctx, sb.ID); err != nil {
			t.Errorf("delete sandbox %s: %v", sb.ID, err)
		}
	})
	s := &sandbox{a: a, id: sb.ID, caps: caps}
	s.address, _ = netip.ParseAddr(strings.Split(sb.Address, "/")[0])
	if err := s.copyIn(ctx, probePath, ProbeScript); err != nil {
		t.Fatalf("copy probe.py into %s: %v", sb.ID, err)
	}
	return s
}

func (s *sandbox) copyIn(ctx context.Context, path string, body []byte) error {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: filepath.Base(path), Mode: 0o644, Size: int64(len(body)), ModTime: time.Now()}); err != nil {
		return err
	}
	if _, err := tw.Write(body); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return s.a.c.CopyIn(ctx, s.id, filepath.Dir(path), &b)
}

// result is one command's outcome in a sandbox.
type result struct {
	cmd            string
	stdout, stderr string
	code           int
	start, end     time.Time
}

func (r result) output() string { return strings.TrimSpace(r.stdout + "\n" + r.stderr) }

// run runs sh -c cmd in the sandbox (stdin optional).
func (s *sandbox) run(ctx context.Context, cmd string, stdin []byte) (result, error) {
	return s.exec(ctx, cmd, stdin, 2*time.Minute)
}

// runTimeout is run with a longer exec timeout (a batch of attempts).
func (s *sandbox) runTimeout(ctx context.Context, cmd string, timeout time.Duration) (result, error) {
	return s.exec(ctx, cmd, nil, timeout)
}

func (s *sandbox) exec(ctx context.Context, cmd string, stdin []byte, timeout time.Duration) (result, error) {
	var out, errb bytes.Buffer
	r := result{cmd: cmd, start: time.Now()}
	res, err := s.a.c.Exec(ctx, s.id, client.ExecRequest{Argv: []string{"sh", "-c", cmd}, Stdin: stdin,
		Timeout: client.Duration(timeout)}, &out, &errb)
	r.end = time.Now()
	r.stdout, r.stderr, r.code = out.String(), errb.String(), res.ExitCode
	return r, err
}

// events returns the sandbox's audit events between from and to.
func (s *sandbox) events(ctx context.Context, from time.Time) ([]audit.Event, error) {
	var evs []audit.Event
	err := s.a.c.Logs(ctx, client.LogQuery{Sandbox: s.id, Since: from}, func(e audit.Event) error {
		evs = append(evs, e)
		return nil
	})
	return evs, err
}

// describe renders events, one JSON line each, for failure messages.
func describe(evs []audit.Event) string {
	var b strings.Builder
	for _, e := range evs {
		j, _ := json.Marshal(e)
		b.Write(j)
		b.WriteByte('\n')
	}
	if b.Len() == 0 {
		return "(no events)\n"
	}
	return b.String()
}

// isRefusal reports whether an event records a denial or a drop, with a
// reason, for the sandbox. A DNS answer whose addresses the rebinding guard
// stripped counts: the record names what was withheld.
func isRefusal(e audit.Event, sandboxID string) bool {
	if e.Sandbox != sandboxID || e.Reason == "" {
		return false
	}
	stripped := e.DNS != nil && len(e.DNS.Stripped) > 0
	return e.Kind == audit.KindDrop || e.Verdict == "deny" || e.WouldDeny || stripped
}

// findRefusal returns the first refusal event whose JSON — with the JSON
// of the flow it belongs to, when it names one — holds every want.
func findRefusal(evs []audit.Event, sandboxID string, want []string) (audit.Event, bool) {
	return findEvent(evs, sandboxID, want, func(e audit.Event) bool { return isRefusal(e, sandboxID) })
}

// findEvent returns the first event of the sandbox that is ok and whose
// JSON (joined with its flow's records) holds every want.
func findEvent(evs []audit.Event, sandboxID string, want []string, ok func(audit.Event) bool) (audit.Event, bool) {
	flows := map[string][]byte{}
	for _, e := range evs {
		if e.Kind == audit.KindFlow && e.ID != "" {
			j, _ := json.Marshal(e)
			flows[e.ID] = append(flows[e.ID], j...)
		}
	}
	for _, e := range evs {
		if e.Sandbox != sandboxID || !ok(e) {
			continue
		}
		j, _ := json.Marshal(e)
		if e.HTTP != nil && e.HTTP.FlowID != "" {
			j = append(j, flows[e.HTTP.FlowID]...)
		}
		text := strings.ToLower(string(j))
		all := true
		for _, w := range want {
			all = all && strings.Contains(text, strings.ToLower(w))
		}
		if all {
			return e, true
		}
	}
	return audit.Event{}, false
}
