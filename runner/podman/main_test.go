package podman_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"airlock/audit"
	"airlock/runner"
	"airlock/runner/podman"
)

const busybox = "localhost/airlock/busybox:1"

var (
	skipReason    string
	engine        *podman.Engine
	serviceSocket string
	agentBin      string // airlock-init built for the tests; every env uses it unless NoAgent
)

// buildAgent builds airlock-init (static) into dir.
func buildAgent(dir string) (string, error) {
	out := filepath.Join(dir, "airlock-init")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "airlock/cmd/airlock-init")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build airlock-init: %v: %s", err, b)
	}
	return out, nil
}

func TestMain(m *testing.M) {
	code := func() int {
		if os.Geteuid() != 0 {
			skipReason = "needs root (sandbox veths, the sandbox user's podman service)"
			return m.Run()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// A private service on its own socket: the tests stop it at the end
		// without disturbing anyone else's.
		u, err := user.Lookup("airlock-sandbox")
		if err != nil {
			skipReason = fmt.Sprintf("no sandbox user (run 'make setup'): %v", err)
			return m.Run()
		}
		sock := filepath.Join("/run/user", u.Uid, "podman", "airlock-test-"+randHex(4)+".sock")
		if s := os.Getenv(helperEnv + "_SOCKET"); s != "" { // a crash helper uses its parent's service
			sock = s
			engine, err = podman.NewEngine(ctx, sock)
		} else {
			engine, err = podman.Connect(ctx, podman.ServiceConfig{Socket: sock})
		}
		serviceSocket = sock
		if err != nil {
			skipReason = fmt.Sprintf("podman service for the sandbox user not available: %v", err)
			return m.Run()
		}
		defer func() {
			engine.Close()
			os.Remove(sock)
		}()
		if _, err := engine.ImageID(ctx, busybox); err != nil {
			skipReason = fmt.Sprintf("image %s is absent (run 'make image'): %v", busybox, err)
		}
		dir, err := os.MkdirTemp("", "airlock-init-build-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		if agentBin, err = buildAgent(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// env is one test's runner with its own instance, state dir and address
// pool, and a network hook that records its calls.
type env struct {
	r        *runner.Runner
	instance string
	pool     netip.Prefix
	stateDir string
	cfg      runner.Config

	mu       sync.Mutex
	events   []audit.Event
	attached map[string]int // sandbox -> ifindex while attached
	detached []string
}

func newEnv(tb testing.TB, mod func(*runner.Config)) *env {
	tb.Helper()
	if skipReason != "" {
		tb.Skip(skipReason)
	}
	state, err := os.MkdirTemp("/var/tmp", "airlock-runner-test-")
	if err != nil {
		tb.Fatal(err)
	}
	os.Chmod(state, 0o711)
	b := make([]byte, 1)
	rand.Read(b)
	e := &env{instance: "test-" + randHex(4), stateDir: state, attached: map[string]int{},
		pool: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, b[0], 0}), 24)}
	e.cfg = runner.Config{
		Engine:   engine,
		Emitter:  audit.EmitterFunc(e.emit),
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Instance: e.instance, StateDir: state, Pool: e.pool,
		AttachNetwork: e.attach,
		CACertPEM:     []byte("-----BEGIN CERTIFICATE-----\nAIRLOCKTESTCA\n-----END CERTIFICATE-----\n"),
		ExecTimeout:   time.Minute,
		AgentBinary:   agentBin,
	}
	if mod != nil {
		mod(&e.cfg)
	}
	if e.r, err = runner.New(e.cfg); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.cleanup(tb) })
	return e
}

func (e *env) emit(ev audit.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, ev)
}

func (e *env) attach(idx int, n runner.SandboxNet) (func() error, error) {
	if !strings.HasPrefix(n.HostIfName, runner.VethPrefix) || idx <= 0 {
		return nil, fmt.Errorf("bad veth %s/%d", n.HostIfName, idx)
	}
	e.mu.Lock()
	e.attached[n.SandboxID] = idx
	e.mu.Unlock()
	return func() error {
		e.mu.Lock()
		defer e.mu.Unlock()
		delete(e.attached, n.SandboxID)
		e.detached = append(e.detached, n.SandboxID)
		return nil
	}, nil
}

// cleanup destroys what the test left and removes anything still tagged
// with this instance, pass or fail.
func (e *env) cleanup(tb testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, sb := range e.r.List() {
		if err := e.r.Destroy(ctx, sb.ID); err != nil {
			tb.Errorf("cleanup: %v", err)
		}
	}
	e.r.Close()
	cs, _ := engine.List(ctx, map[string]string{runner.LabelInstance: e.instance})
	for _, c := range cs {
		engine.Remove(ctx, c.ID)
	}
	for _, l := range e.links() {
		netlink.LinkDel(l)
	}
	os.RemoveAll(e.stateDir)
}

// links returns host links tagged for this instance.
func (e *env) links() []netlink.Link {
	ls, _ := netlink.LinkList()
	var out []netlink.Link
	for _, l := range ls {
		if strings.HasPrefix(l.Attrs().Alias, "airlock:"+e.instance+":") {
			out = append(out, l)
		}
	}
	return out
}

// assertGone checks that nothing of the sandbox is left on the host.
func (e *env) assertGone(t *testing.T, sb runner.Sandbox) {
	t.Helper()
	ctx := context.Background()
	cs, err := engine.List(ctx, map[string]string{runner.LabelSandbox: sb.ID})
	if err != nil || len(cs) != 0 {
		t.Errorf("containers left for %s: %v %v", sb.ID, cs, err)
	}
	if _, err := netlink.LinkByName(runner.VethName(sb.ID)); err == nil {
		t.Errorf("veth %s left", runner.VethName(sb.ID))
	}
	routes, _ := netlink.RouteGet(sb.Address.AsSlice())
	for _, r := range routes {
		if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil && strings.HasPrefix(l.Attrs().Name, runner.VethPrefix) {
			t.Errorf("route to %s via %s left", sb.Address, l.Attrs().Name)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.attached[sb.ID]; ok {
		t.Errorf("network path of %s not detached", sb.ID)
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, "sandboxes", sb.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state of %s left: %v", sb.ID, err)
	}
}

func (e *env) mustExec(t testing.TB, id string, argv ...string) string {
	t.Helper()
	res, err := e.r.Exec(context.Background(), id, runner.ExecRequest{Argv: argv})
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d, stderr %q", argv, res.ExitCode, res.Stderr)
	}
	return string(res.Stdout)
}

func tarFiles(files map[string]string) *bytes.Buffer {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))})
		io.WriteString(tw, body)
	}
	tw.Close()
	return &buf
}

func untar(t *testing.T, r io.Reader) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = string(b)
	}
}

func netlinkDel(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkDel(l)
}
