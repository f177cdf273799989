package e2e

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"airlock/bpf"
	"airlock/client"
	"airlock/e2e/world"
	"airlock/runner"
)

// confine is how the unit runs a process, as far as this host can
// reproduce it without systemd as PID 1: a private mount namespace with
// /usr, /boot, /efi and /etc read-only (ProtectSystem=full), umask 0077
// (UMask=), and the unit's capability bounding set; as user uid:gid when
// given (the Podman service the appliance starts inherits all of it).
func confine(bset string, uid, gid int, argv ...string) *exec.Cmd {
	script := `umask 077
for d in /usr /boot /efi /etc; do
  [ -d "$d" ] || continue
  mount --bind "$d" "$d" && mount -o remount,bind,ro "$d" || exit 97
done
exec setpriv "$@"`
	priv := []string{"--bounding-set=" + bset}
	if uid >= 0 {
		priv = append(priv, "--reuid="+strconv.Itoa(uid), "--regid="+strconv.Itoa(gid), "--clear-groups")
	}
	args := append([]string{"--mount", "--propagation", "slave", "sh", "-c", script, "sh"}, priv...)
	return exec.Command("unshare", append(append(args, "--"), argv...)...)
}

// TestServeUnderTheUnitsConfinement runs the installed appliance (through
// the bin/airlock link) and the sandbox user's Podman service the way the
// unit would: every capability outside CapabilityBoundingSet gone, a
// read-only /usr and /etc, no NoNewPrivileges. The appliance must start,
// run a sandbox with its in-sandbox agent (setns through a pidfd), steer
// and inspect its traffic, inject a credential, reopen its JSONL stream
// after logrotate (SIGUSR1) with the chain intact, stop on SIGTERM, and
// tear its kernel path down (`serve --teardown`, the uninstall step).
func TestServeUnderTheUnitsConfinement(t *testing.T) {
	requireAppliance(t)
	requireTools(t, "setpriv", "unshare", "logrotate")
	in := installTree(t)
	bset := boundingSet(t, in.unit)
	if v := unitDirective(t, in.unit, "NoNewPrivileges"); v != "no" {
		t.Fatalf("NoNewPrivileges=%s: rootless Podman's setuid newuidmap would not work (TestNewuidmapUnderTheUnit)", v)
	}
	u, err := userIDs("airlock-sandbox")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.uid)
	gid := sandboxGID(t)

	w := startWorld(t)
	a := &appliance{t: t, w: w}
	if a.dir, err = os.MkdirTemp("", "airlock-unit-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(a.dir) })
	os.Chmod(a.dir, 0o711)
	if err := a.pickPool(); err != nil {
		t.Fatal(err)
	}
	if err := a.writeFiles(); err != nil {
		t.Fatal(err)
	}
	podSock := startConfinedPodman(t, bset, uid, gid, u, w.ID)
	cfg, _ := os.ReadFile(a.config)
	cfg = bytes.Replace(cfg, []byte("user = \"airlock-sandbox\"\n"), []byte(fmt.Sprintf("user = \"airlock-sandbox\"\nsocket = %q\n", podSock)), 1)
	if err := os.WriteFile(a.config, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	a.c = client.New(a.socket)

	instance := "unit" + w.ID
	pinDir := "/sys/fs/bpf/airlock-" + instance
	// Registered first so it runs last, after serve has stopped, even when
	// the start fails half-way.
	t.Cleanup(func() { teardownPath(t, pinDir, unitGuard(instance)) })
	srv := startConfinedServe(t, a, in, bset, instance, pinDir)

	if got := capBnd(t, srv.Process.Pid); got != capMask(t, bset) {
		t.Fatalf("serve's CapBnd is %s, want the unit's %s", got, capMask(t, bset))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h, err := a.c.Health(ctx)
	if err != nil || h.Status != "ok" {
		t.Fatalf("health under the unit's confinement: %+v %v\n%s", h, err, a.tail(40))
	}
	sb, err := a.c.Create(ctx, client.CreateRequest{Image: debianImage, Policy: PolicyName})
	if err != nil {
		t.Fatalf("create a sandbox: %v\n%s", err, a.tail(40))
	}
	t.Cleanup(func() { removeSandbox(t, a, podSock, sb.ID) })
	if sb.Agent != runner.AgentName {
		t.Errorf("the sandbox's commands go through %q, want the in-sandbox agent %s beside the installed binary\n%s",
			sb.Agent, runner.AgentName, a.tail(30))
	}
	s := &sandbox{a: a, id: sb.ID}
	api := "https://" + w.Name(world.RoleAPI)
	r, err := s.run(ctx, "curl -sS -f -m 20 "+api+"/v1/items/42", nil)
	if err != nil || r.code != 0 || !strings.Contains(r.stdout, `"auth":"ok"`) {
		t.Fatalf("a request through the proxy with an injected credential: %v %+v\n%s", err, r, a.tail(30))
	}

	// logrotate, as the installed snippet does it, but aimed at this
	// appliance's stream and process.
	stream := filepath.Join(a.dir, "events.jsonl")
	rotateWith(t, in.logrotate, stream, srv.Process.Pid)
	rotated, _ := filepath.Glob(stream + "-*")
	if len(rotated) != 1 {
		t.Fatalf("logrotate left %v beside the stream", rotated)
	}
	if r, err := s.run(ctx, "curl -sS -f -m 20 "+api+"/v1/items/43", nil); err != nil || r.code != 0 {
		t.Fatalf("a request after the rotation: %v %+v", err, r)
	}
	waitFor(t, 30*time.Second, "records in the reopened stream", func() bool {
		fi, err := os.Stat(stream)
		return err == nil && fi.Size() > 0
	})
	out, err := exec.Command(in.bin, "logs", "verify", rotated[0], stream).CombinedOutput()
	if err != nil {
		t.Errorf("logs verify across the rotation: %v\n%s", err, out)
	}

	removeSandbox(t, a, podSock, sb.ID)
	if err := srv.stop(45 * time.Second); err != nil {
		t.Errorf("serve on SIGTERM: %v\n%s", err, a.tail(20))
	}
	out, err = exec.Command(in.bin, "serve", "--teardown", "--config", a.config, "--instance", instance, "--pin-dir", pinDir).CombinedOutput()
	if err != nil {
		t.Errorf("serve --teardown: %v\n%s", err, out)
	}
	if _, err := os.Stat(pinDir); err == nil {
		t.Errorf("serve --teardown left %s", pinDir)
	}
}

// TestNewuidmapUnderTheUnit: rootless Podman maps a user namespace with
// the setuid newuidmap. Under the unit's bounding set it works; under
// no_new_privs it does not, which is why the unit says NoNewPrivileges=no.
func TestNewuidmapUnderTheUnit(t *testing.T) {
	requireServe(t, false)
	requireTools(t, "setpriv", "newuidmap", "unshare")
	in := installTree(t)
	u, err := userIDs("airlock-sandbox")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := subordinate("/etc/subuid", "airlock-sandbox")
	if err != nil {
		t.Skipf("skipping: %v (make setup)", err)
	}
	script := `unshare --user sleep 30 & p=$!; sleep 0.3; newuidmap $p 0 $(id -u) 1 1 ` + sub + `; rc=$?; kill $p; exit $rc`
	run := func(extra ...string) ([]byte, error) {
		args := append([]string{"--bounding-set=" + boundingSet(t, in.unit)}, extra...)
		args = append(args, "runuser", "-u", "airlock-sandbox", "--", "sh", "-c", script)
		cmd := exec.Command("setpriv", args...)
		cmd.Dir = u.home
		return cmd.CombinedOutput()
	}
	if out, err := run(); err != nil {
		t.Errorf("newuidmap under the unit's bounding set: %v\n%s", err, out)
	}
	if out, err := run("--no-new-privs"); err == nil {
		t.Errorf("newuidmap worked under no_new_privs: NoNewPrivileges=no would be unnecessary\n%s", out)
	}
}

func subordinate(file, name string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Split(l, ":"); len(f) == 3 && f[0] == name {
			return f[1] + " " + f[2], nil
		}
	}
	return "", fmt.Errorf("%s has no range for %s", file, name)
}

func sandboxGID(t *testing.T) int {
	out, err := exec.Command("id", "-g", "airlock-sandbox").Output()
	if err != nil {
		t.Fatal(err)
	}
	g, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return g
}

// startConfinedPodman starts the sandbox user's Podman service on a socket
// of this test's own, confined like the unit, and stops it (by PID) at the
// end.
func startConfinedPodman(t *testing.T, bset string, uid, gid int, u userInfo, id string) string {
	run := "/run/user/" + u.uid
	for _, d := range []string{run, run + "/podman"} {
		os.MkdirAll(d, 0o700)
		os.Chown(d, uid, gid)
	}
	sock := filepath.Join(run, "podman", "airlock-unit-"+id+".sock")
	cmd := confine(bset, uid, gid, "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME="+u.home,
		"USER=airlock-sandbox", "XDG_RUNTIME_DIR="+run, "podman", "system", "service", "--time=0", "unix://"+sock)
	cmd.Dir = u.home
	logf, err := os.Create(filepath.Join(t.TempDir(), "podman.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	p, err := start(cmd)
	if err != nil {
		t.Fatalf("start the confined podman service: %v", err)
	}
	t.Cleanup(func() {
		p.stop(15 * time.Second)
		logf.Close()
		os.Remove(sock)
	})
	waitFor(t, 30*time.Second, "the confined podman service's socket", func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return sock
}

func startConfinedServe(t *testing.T, a *appliance, in *installed, bset, instance, pinDir string) *proc {
	a.logFile = filepath.Join(a.dir, "serve.log")
	logf, err := os.Create(a.logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := confine(bset, -1, -1, in.bin, "serve", "--config", a.config, "--instance", instance,
		"--pin-dir", pinDir, "--log-level", "debug")
	cmd.Stdout, cmd.Stderr = logf, logf
	p, err := start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.exited() {
			p.stop(45 * time.Second)
		}
		logf.Close()
		if t.Failed() {
			t.Logf("appliance log (tail):\n%s", a.tail(60))
		}
	})
	waitFor(t, 90*time.Second, "the confined appliance's API", func() bool {
		if p.exited() {
			t.Fatalf("serve exited during start (%v):\n%s", p.err, a.tail(40))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := a.c.Health(ctx)
		return err == nil
	})
	return p
}

// proc is a started process whose exit is awaited once, in the background.
type proc struct {
	*exec.Cmd
	done chan struct{}
	err  error
}

func start(cmd *exec.Cmd) (*proc, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{Cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to d, then kills; it returns how the
// process ended (an error if it had to be killed).
func (p *proc) stop(d time.Duration) error {
	p.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		p.Process.Kill()
		<-p.done
		return fmt.Errorf("still running %s after SIGTERM: killed", d)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
	}
}

func removeSandbox(t *testing.T, a *appliance, podSock, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.c.Delete(ctx, id); err != nil && !client.IsCode(err, client.CodeNotFound) {
		exec.Command("podman", "--remote", "--url", "unix://"+podSock, "rm", "-f", runner.ContainerName(id)).Run()
	}
}

// rotateWith runs logrotate -f with the installed snippet, aimed at
// stream and at pid instead of airlock.service.
func rotateWith(t *testing.T, snippet, stream string, pid int) {
	b, err := os.ReadFile(snippet)
	if err != nil {
		t.Fatal(err)
	}
	conf := regexp.MustCompile(`(?m)^\S+/events\.jsonl \{`).ReplaceAllString(string(b), stream+" {")
	conf = regexp.MustCompile(`(?m)^\s*systemctl kill .*$`).ReplaceAllString(conf, "\t\tkill -USR1 "+strconv.Itoa(pid))
	if !strings.Contains(conf, stream+" {") || !strings.Contains(conf, "kill -USR1") {
		t.Fatalf("the logrotate snippet no longer has the expected shape:\n%s", b)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "airlock"), []byte(conf), 0o644)
	if out, err := exec.Command("logrotate", "-f", "-s", filepath.Join(dir, "state"), filepath.Join(dir, "airlock")).CombinedOutput(); err != nil {
		t.Fatalf("logrotate: %v\n%s", err, out)
	}
}

// capBnd is a process's capability bounding set as /proc shows it.
func capBnd(t *testing.T, pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("no CapBnd")
	return ""
}

// capMask is what /proc's CapBnd shows for setpriv's bounding set.
func capMask(t *testing.T, bset string) string {
	out, err := exec.Command("setpriv", "--bounding-set="+bset, "grep", "^CapBnd:", "/proc/self/status").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(strings.TrimPrefix(string(out), "CapBnd:"))
}

// unitGuard is the guard `airlock serve --instance` derives (cmd/airlock
// guardFor), for cleaning up after a failed test.
func unitGuard(instance string) bpf.GuardConfig {
	h := fnv.New32a()
	h.Write([]byte(instance))
	n := 2000 + int(h.Sum32()%1000)
	return bpf.GuardConfig{NFTTable: "airlock-" + instance, Table: n, RulePriority: n}
}
