package podman_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/runner"
)

// TestSandboxEndToEnd: create with a bind workspace, exec, network and
// trust set-up as the sandbox sees it, files in and out, diff, destroy
// leaving nothing behind.
func TestSandboxEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	ws, werr := os.MkdirTemp("/var/tmp", "airlock-runner-ws-") // beside the state directory, never in it
	if werr != nil {
		t.Fatal(werr)
	}
	t.Cleanup(func() { os.RemoveAll(ws) })
	os.Chmod(ws, 0o755)
	os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("line one\nline two\n"), 0o644)

	sb, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev",
		Env: map[string]string{"TASK": "t-42"}, Workspace: runner.Workspace{HostDir: ws, Mode: runner.WorkspaceBind}})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.mustExec(t, sb.ID, "echo", "hi"); got != "hi\n" {
		t.Errorf("echo hi: %q", got)
	}

	t.Run("streams and exit code", func(t *testing.T) {
		var out bytes.Buffer
		res, err := e.r.Exec(ctx, sb.ID, runner.ExecRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 3 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || out.String() != "out\n" {
			t.Errorf("got exit %d stdout %q stderr %q streamed %q", res.ExitCode, res.Stdout, res.Stderr, out.String())
		}
		res, err = e.r.Exec(ctx, sb.ID, runner.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("from stdin")})
		if err != nil || string(res.Stdout) != "from stdin" {
			t.Errorf("stdin: %q %v", res.Stdout, err)
		}
		res, err = e.r.Exec(ctx, sb.ID, runner.ExecRequest{Argv: []string{"no-such-command"}})
		if err != nil || res.ExitCode == 0 {
			t.Errorf("missing command: exit %d err %v", res.ExitCode, err)
		}
	})

	t.Run("environment", func(t *testing.T) {
		env := e.mustExec(t, sb.ID, "env")
		for _, want := range []string{"TASK=t-42", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
			"NODE_EXTRA_CA_CERTS=", "GIT_SSL_CAINFO=", "PIP_CERT=", "CURL_CA_BUNDLE=", "REQUESTS_CA_BUNDLE=", "AIRLOCK_SANDBOX=" + sb.ID} {
			if !strings.Contains(env, want) {
				t.Errorf("env lacks %q:\n%s", want, env)
			}
		}
		// Only variables the runner sets (or runtime basics) are there: the
		// host environment is never inherited.
		allowed := map[string]bool{"PATH": true, "HOME": true, "LANG": true, "HOSTNAME": true, "TERM": true,
			"container": true, "TASK": true, "AIRLOCK_SANDBOX": true, "SHLVL": true, "PWD": true}
		for _, k := range runner.CAEnvVars() {
			allowed[k] = true
		}
		for _, line := range strings.Split(strings.TrimSpace(env), "\n") {
			if k, _, _ := strings.Cut(line, "="); !allowed[k] {
				t.Errorf("unexpected variable in the sandbox: %s", line)
			}
		}
		if ca := e.mustExec(t, sb.ID, "cat", runner.CABundlePath); !strings.Contains(ca, "AIRLOCKTESTCA") {
			t.Errorf("CA bundle: %q", ca)
		}
	})

	t.Run("network", func(t *testing.T) {
		if got := e.mustExec(t, sb.ID, "cat", "/etc/resolv.conf"); !strings.Contains(got, "nameserver "+sb.Gateway.String()) {
			t.Errorf("resolv.conf: %q", got)
		}
		if got := e.mustExec(t, sb.ID, "ip", "-4", "addr", "show", "eth0"); !strings.Contains(got, sb.Address.String()+"/32") {
			t.Errorf("eth0: %q", got)
		}
		if got := e.mustExec(t, sb.ID, "ip", "route"); !strings.Contains(got, "default via "+sb.Gateway.String()) {
			t.Errorf("routes: %q", got)
		}
		if got := e.mustExec(t, sb.ID, "cat", "/proc/sys/net/ipv6/conf/all/disable_ipv6"); got != "1\n" {
			t.Errorf("IPv6 not disabled: %q", got)
		}
		if got := e.mustExec(t, sb.ID, "ip", "-6", "addr"); strings.TrimSpace(got) != "" {
			t.Errorf("IPv6 addresses in the sandbox: %q", got)
		}
		e.mu.Lock()
		idx := e.attached[sb.ID]
		e.mu.Unlock()
		if idx == 0 {
			t.Error("network hook not called")
		}
		// The sandbox cannot change its own network (no CAP_NET_ADMIN).
		res, _ := e.r.Exec(ctx, sb.ID, runner.ExecRequest{Argv: []string{"ip", "addr", "add", "198.18.255.9/32", "dev", "eth0"}})
		if res.ExitCode == 0 {
			t.Error("the sandbox could add an address to its interface")
		}
	})

	// busybox wget ends cleanly (never a crash, 139; busybox 1.35 crashed on
	// -T) both for help and for fetches that must fail. The failing fetch
	// goes to the sandbox's own loopback, where nothing listens: the answer
	// (a reset) does not depend on what the host does with the sandbox's
	// packets — another appliance's guards on this host may drop them.
	t.Run("busybox wget", func(t *testing.T) {
		for _, c := range []struct {
			argv []string
			exit int
			want string
		}{
			{[]string{"wget", "--help"}, 0, "Usage: wget"},
			{[]string{"wget", "-T", "5", "-O-", "http://127.0.0.1:1/"}, 1, "Connection refused"},
			{[]string{"wget", "--timeout=5", "-O-", "http://127.0.0.1:1/"}, 1, "Connection refused"},
			// busybox sh runs the applet itself, not /bin/wget: the patched
			// binary ignores -T's argument but never crashes.
			{[]string{"sh", "-c", "wget -T5 -O- http://127.0.0.1:1/"}, 1, "Connection refused"},
		} {
			res, err := e.r.Exec(ctx, sb.ID, runner.ExecRequest{Argv: c.argv})
			if err != nil || res.ExitCode != c.exit || !strings.Contains(string(res.Stdout)+string(res.Stderr), c.want) {
				t.Errorf("%q: exit %d (want %d), err %v, output lacks %q:\n%s%s", c.argv, res.ExitCode, c.exit, err, c.want, res.Stdout, res.Stderr)
			}
		}
	})

	t.Run("files and diff", func(t *testing.T) {
		if err := e.r.CopyIn(ctx, sb.ID, "/workspace", tarFiles(map[string]string{"hello.txt": "hello\n"})); err != nil {
			t.Fatal(err)
		}
		e.mustExec(t, sb.ID, "sh", "-c", "echo 'line 2' > /workspace/notes.txt.new && sed -i 's/two/TWO/' /workspace/notes.txt")
		if got := e.mustExec(t, sb.ID, "cat", "/workspace/hello.txt"); got != "hello\n" {
			t.Errorf("copied-in file: %q", got)
		}
		var out bytes.Buffer
		if err := e.r.CopyOut(ctx, sb.ID, "/workspace/hello.txt", &out); err != nil {
			t.Fatal(err)
		}
		if files := untar(t, &out); files["hello.txt"] != "hello\n" {
			t.Errorf("copied out: %v", files)
		}
		d, err := e.r.Diff(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range d.Changes {
			got = append(got, c.Kind+" "+c.Path)
		}
		want := "added hello.txt,modified notes.txt,added notes.txt.new"
		if strings.Join(got, ",") != want {
			t.Errorf("changes %v, want %s", got, want)
		}
		if !strings.Contains(d.Patch, "-line two\n+line TWO\n") {
			t.Errorf("patch:\n%s", d.Patch)
		}
		// The bind workspace is the host directory.
		if b, _ := os.ReadFile(filepath.Join(ws, "hello.txt")); string(b) != "hello\n" {
			t.Errorf("host workspace: %q", b)
		}
	})

	if err := e.r.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	e.assertGone(t, sb)
	var stages []string
	for _, ev := range e.events {
		if ev.Lifecycle != nil {
			stages = append(stages, ev.Lifecycle.Stage+":"+string(ev.Lifecycle.State))
		}
	}
	if got := strings.Join(stages, ","); got != "created:creating,started:creating,ready:running,files:running,ending:ending,destroyed:ended" {
		t.Errorf("lifecycle events: %v", got)
	}
}

func TestExecTimeoutKillsTheCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	sb, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.r.Exec(ctx, sb.ID, runner.ExecRequest{Argv: []string{"sh", "-c", "echo started; sleep 300"}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || !res.Killed || string(res.Stdout) != "started\n" {
		t.Errorf("result %+v", res)
	}
	if ps := e.mustExec(t, sb.ID, "ps"); strings.Contains(ps, "sleep 300") {
		t.Errorf("the command's child survived the timeout:\n%s", ps)
	}
}

func TestCopyOutMissingAndCopyInReadOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	sb, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev", ReadOnlyRoot: true,
		Limits: runner.Limits{NoFile: 512, FileSizeBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.r.CopyOut(ctx, sb.ID, "/no/such/file", new(bytes.Buffer)); !errors.Is(err, runner.ErrNotFound) {
		t.Errorf("CopyOut of a missing path: %v", err)
	}
	if err := e.r.CopyIn(ctx, sb.ID, "/etc", tarFiles(map[string]string{"x": "y"})); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("CopyIn into /etc of a read-only sandbox: %v", err)
	}
	res, _ := e.r.Exec(ctx, sb.ID, runner.ExecRequest{Argv: []string{"touch", "/etc/x"}})
	if res.ExitCode == 0 {
		t.Error("wrote to a read-only root")
	}
	e.mustExec(t, sb.ID, "touch", "/tmp/x", "/workspace/x", "/run/x", "/var/tmp/x")
	if got := e.mustExec(t, sb.ID, "sh", "-c", "ulimit -n"); got != "512\n" {
		t.Errorf("rlimit nofile: %q", got)
	}
	res, _ = e.r.Exec(ctx, sb.ID, runner.ExecRequest{Argv: []string{"sh", "-c", "head -c 2097152 /dev/zero > /tmp/big"}})
	if res.ExitCode == 0 {
		t.Error("fsize limit not enforced: a 2 MiB file was written under a 1 MiB limit")
	}
	for _, l := range sb.Limits {
		if l.Name == "nproc" && l.InForce {
			t.Errorf("nproc reported in force: %+v", l)
		}
	}
}

// TestPauseOnThisHost: pause needs no cgroup freezer: the network hook is
// told to cut (and then restore) the sandbox's network, a counting loop
// stands still while paused (read through the engine, a process pause did
// not stop), commands are refused, and resume lets it count again.
func TestPauseOnThisHost(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var blocks []bool
	e := newEnv(t, func(c *runner.Config) {
		c.BlockNetwork = func(_ string, on bool) error { mu.Lock(); blocks = append(blocks, on); mu.Unlock(); return nil }
	})
	ctx := context.Background()
	sb, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	loop := "i=0; while :; do i=$((i+1)); echo $i > /tmp/c.tmp; mv /tmp/c.tmp /tmp/count; sleep 0.05; done"
	if _, err := e.r.Exec(ctx, sb.ID, runner.ExecRequest{Argv: []string{"sh", "-c", loop}, Background: true}); err != nil {
		t.Fatal(err)
	}
	count := func() string {
		var out bytes.Buffer
		engine.Exec(ctx, sb.ContainerID, runner.Process{Argv: []string{"cat", "/tmp/count"}, Cwd: "/", Stdout: &out, Stderr: io.Discard}, func() {})
		return strings.TrimSpace(out.String())
	}
	time.Sleep(300 * time.Millisecond)
	if err := e.r.Pause(ctx, sb.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	c1 := count()
	time.Sleep(time.Second)
	if c2 := count(); c1 == "" || c1 != c2 {
		t.Errorf("the loop counted while paused: %q -> %q", c1, c2)
	}
	if _, err := e.r.Exec(ctx, sb.ID, runner.ExecRequest{Argv: []string{"true"}}); err == nil {
		t.Error("a command ran in a paused sandbox")
	}
	if err := e.r.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if c3 := count(); c3 == c1 {
		t.Errorf("the loop did not resume: %q", c3)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(blocks) != "[true false]" {
		t.Errorf("network blocks %v, want cut then restored", blocks)
	}
}

func TestSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	sb, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	e.mustExec(t, sb.ID, "sh", "-c", "echo kept > /root/state")
	s, err := e.r.Snapshot(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, done := context.WithTimeout(context.Background(), time.Minute)
		defer done()
		for _, x := range e.r.List() { // the image is in use until they are gone
			e.r.Destroy(c, x.ID)
		}
		if err := engine.RemoveImage(c, s.Image); err != nil {
			t.Errorf("remove snapshot image: %v", err)
		}
	})
	if s.Image != runner.SnapshotRepo+":"+sb.ID || s.Warning == "" {
		t.Errorf("snapshot %+v", s)
	}
	id, err := engine.ImageID(ctx, s.Image)
	if err != nil || id != s.ImageID {
		t.Errorf("image %s: %q %v", s.Image, id, err)
	}
	// A sandbox from the snapshot has the file.
	sb2, err := e.r.Create(ctx, runner.CreateRequest{Image: s.Image, Policy: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.mustExec(t, sb2.ID, "cat", "/root/state"); got != "kept\n" {
		t.Errorf("file in the snapshot: %q", got)
	}
	e.mustExec(t, sb.ID, "true") // the original keeps running
}

func TestReconcileAdoptsAndCleans(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	keep, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	broken, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	// A crash; then the veth of one sandbox goes missing, so it cannot be
	// re-adopted safely.
	e.r.Close()
	if err := netlinkDel(runner.VethName(broken.ID)); err != nil {
		t.Fatal(err)
	}
	r2, err := runner.New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.r = r2
	rep, err := r2.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Adopted) != 1 || rep.Adopted[0] != keep.ID || len(rep.Removed) != 1 || rep.Removed[0] != runner.ContainerName(broken.ID) {
		t.Errorf("report %+v", rep)
	}
	if got := e.mustExec(t, keep.ID, "ip", "-4", "addr", "show", "eth0"); !strings.Contains(got, keep.Address.String()) {
		t.Errorf("adopted sandbox's network: %q", got)
	}
	e.assertGoneContainer(t, broken)
	if err := r2.Destroy(ctx, keep.ID); err != nil {
		t.Fatal(err)
	}
	e.assertGone(t, keep)
}

func (e *env) assertGoneContainer(t *testing.T, sb runner.Sandbox) {
	t.Helper()
	cs, err := engine.List(context.Background(), map[string]string{runner.LabelSandbox: sb.ID})
	if err != nil || len(cs) != 0 {
		t.Errorf("containers left for %s: %v %v", sb.ID, cs, err)
	}
}

// TestTwentyConcurrentSandboxes creates 20 busybox sandboxes at once; every
// one must work and have its own address.
func TestTwentyConcurrentSandboxes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	const n = 20
	var wg sync.WaitGroup
	sbs := make([]runner.Sandbox, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sbs[i], errs[i] = e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev"})
			if errs[i] != nil {
				return
			}
			res, err := e.r.Exec(ctx, sbs[i].ID, runner.ExecRequest{Argv: []string{"sh", "-c", "ip -4 -o addr show eth0; echo $AIRLOCK_SANDBOX"}})
			switch {
			case err != nil:
				errs[i] = err
			case !strings.Contains(string(res.Stdout), sbs[i].Address.String()+"/32") || !strings.Contains(string(res.Stdout), sbs[i].ID):
				errs[i] = errors.New("wrong output: " + string(res.Stdout))
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, err := range errs {
		if err != nil {
			t.Errorf("sandbox %d: %v", i, err)
			continue
		}
		if seen[sbs[i].Address.String()] {
			t.Errorf("address %s given twice", sbs[i].Address)
		}
		seen[sbs[i].Address.String()] = true
	}
	for _, sb := range sbs {
		if sb.ID == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.r.Destroy(ctx, sb.ID); err != nil {
				t.Errorf("destroy %s: %v", sb.ID, err)
			}
		}()
	}
	wg.Wait()
	for _, sb := range sbs {
		if sb.ID != "" {
			e.assertGone(t, sb)
		}
	}
}

// TestCapAdd: a sandbox created with CapAdd NET_RAW and NET_ADMIN has both
// in its effective set (and can use them in its own namespace); a default
// sandbox has neither.
func TestCapAdd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	capEff := func(id string) uint64 {
		t.Helper()
		for _, line := range strings.Split(e.mustExec(t, id, "cat", "/proc/self/status"), "\n") {
			if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
				n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				if err != nil {
					t.Fatalf("CapEff %q: %v", v, err)
				}
				return n
			}
		}
		t.Fatal("no CapEff in /proc/self/status")
		return 0
	}
	const netAdmin, netRaw = 1 << 12, 1 << 13 // linux/capability.h
	def, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	netCaps, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev", CapAdd: []string{"NET_RAW", "NET_ADMIN"}})
	if err != nil {
		t.Fatal(err)
	}
	if c := capEff(def.ID); c&(netAdmin|netRaw) != 0 {
		t.Errorf("default sandbox CapEff %#x has NET_ADMIN or NET_RAW", c)
	}
	if c := capEff(netCaps.ID); c&netAdmin == 0 || c&netRaw == 0 {
		t.Errorf("CapAdd sandbox CapEff %#x lacks NET_ADMIN or NET_RAW", c)
	}
	if got := netCaps.CapAdd; len(got) != 2 {
		t.Errorf("Sandbox.CapAdd %v", got)
	}
	// Used inside its own namespace: a raw ICMP socket and an address change.
	e.mustExec(t, netCaps.ID, "ping", "-c", "1", "-W", "5", "127.0.0.1")
	e.mustExec(t, netCaps.ID, "ip", "addr", "add", "198.18.255.9/32", "dev", "lo")
	if res, _ := e.r.Exec(ctx, def.ID, runner.ExecRequest{Argv: []string{"ping", "-c", "1", "-W", "5", "127.0.0.1"}}); res.ExitCode == 0 {
		t.Error("the default sandbox could open a raw socket")
	}
	if _, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev", CapAdd: []string{"SYS_ADMIN"}}); !errors.Is(err, runner.ErrInvalid) {
		t.Errorf("CapAdd SYS_ADMIN: %v, want ErrInvalid", err)
	}
}

// TestDebianImage: the real clients are in the Debian image and trust the
// bundle, which holds the image's roots and Airlock's CA.
func TestDebianImage(t *testing.T) {
	t.Parallel()
	const debian = "localhost/airlock/debian:12"
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := engine.ImageID(ctx, debian); err != nil {
		t.Skipf("image %s is absent (run 'make image'): %v", debian, err)
	}
	sb, err := e.r.Create(ctx, runner.CreateRequest{Image: debian, Policy: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{{"curl", "--version"}, {"git", "--version"}, {"python3", "--version"},
		{"node", "--version"}, {"npm", "--version"}, {"python3", "-m", "pip", "--version"}, {"python3", "-m", "venv", "--help"},
		{"dig", "-v"}, {"sh", "-c", "command -v nc"}, {"openssl", "version"}, {"ip", "-V"}, {"jq", "--version"}} {
		e.mustExec(t, sb.ID, argv...)
	}
	bundle := e.mustExec(t, sb.ID, "cat", runner.CABundlePath)
	if n := strings.Count(bundle, "BEGIN CERTIFICATE"); n < 50 || !strings.Contains(bundle, "AIRLOCKTESTCA") {
		t.Errorf("bundle has %d certificates, Airlock CA included: %t", n, strings.Contains(bundle, "AIRLOCKTESTCA"))
	}
	py := e.mustExec(t, sb.ID, "python3", "-c", "import os; print(os.environ['REQUESTS_CA_BUNDLE'])")
	if py != runner.CABundlePath+"\n" {
		t.Errorf("python sees REQUESTS_CA_BUNDLE=%q", py)
	}
}

// TestServiceRestartedWhenGone: the engine starts the sandbox user's
// service again when its socket stops answering (here: the tests' private
// service, stopped on purpose).
func TestServiceRestartedWhenGone(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if !engine.StartedService() {
		t.Skip("the service was not started by this process; not stopping it")
	}
	if err := engine.Close(); err != nil {
		t.Fatal(err)
	}
	sb, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "dev"})
	if err != nil {
		t.Fatalf("create after the service stopped: %v", err)
	}
	e.mustExec(t, sb.ID, "true")
}
