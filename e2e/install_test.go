package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// installed is one `make install-files` of this tree into a temporary
// root with real absolute paths (so systemd-analyze can check that the
// unit's commands exist), shared by the tests below.
type installed struct {
	root, out          string
	bin, libexec, unit string
	etc, state, logs   string
	logrotate          string
}

var (
	installOnce sync.Once
	installRes  *installed
	installErr  error
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s is not installed (make setup installs it)", tool)
		}
	}
}

func makeVars(in *installed) []string {
	return []string{"PREFIX=" + filepath.Join(in.root, "usr/local"), "SYSCONFDIR=" + filepath.Join(in.root, "etc"),
		"STATEDIR=" + in.state, "LOGDIR=" + in.logs, "OUT=" + in.out}
}

func runMake(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory", "-C", repoRoot()}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// installTree builds with `make build` and installs with `make
// install-files` once per test binary.
func installTree(t *testing.T) *installed {
	t.Helper()
	requireTools(t, "make", "go")
	installOnce.Do(func() {
		root, err := os.MkdirTemp("", "airlock-install-")
		if err != nil {
			installErr = err
			return
		}
		os.Chmod(root, 0o755)
		in := &installed{root: root, out: filepath.Join(root, "build")}
		in.bin = filepath.Join(root, "usr/local/bin/airlock")
		in.libexec = filepath.Join(root, "usr/local/libexec/airlock")
		in.unit = filepath.Join(root, "usr/local/lib/systemd/system/airlock.service")
		in.etc = filepath.Join(root, "etc/airlock")
		in.state, in.logs = filepath.Join(root, "var/lib/airlock"), filepath.Join(root, "var/log/airlock")
		in.logrotate = filepath.Join(root, "etc/logrotate.d/airlock")
		if out, err := runMake("build", "OUT="+in.out); err != nil {
			installErr = fmt.Errorf("make build: %v\n%s", err, out)
			return
		}
		if out, err := runMake(append([]string{"install-files"}, makeVars(in)...)...); err != nil {
			installErr = fmt.Errorf("make install-files: %v\n%s", err, out)
			return
		}
		installRes = in
	})
	if installErr != nil {
		t.Fatal(installErr)
	}
	return installRes
}

// TestMakeInstallLayout: the binaries sit together in libexec (airlock
// finds airlockd, which runs serve, and the runner airlock-init beside
// the real executable; bin/airlock is a link to airlock), the state
// directory is 0700, the operator's config is never overwritten, the
// installed config passes `serve --check`, and DESTDIR leaves no trace in
// the installed files.
func TestMakeInstallLayout(t *testing.T) {
	in := installTree(t)
	for p, want := range map[string]os.FileMode{
		filepath.Join(in.libexec, "airlock"):      0o755,
		filepath.Join(in.libexec, "airlock-cli"):  0o755,
		filepath.Join(in.libexec, "airlockd"):     0o755,
		filepath.Join(in.libexec, "airlock-init"): 0o755,
		in.unit:                               0o644,
		in.logrotate:                          0o644,
		in.etc:                                0o750 | os.ModeDir,
		filepath.Join(in.etc, "airlock.toml"): 0o640,
		filepath.Join(in.etc, "policies"):     0o750 | os.ModeDir,
		filepath.Join(in.etc, "policies/coding-agent.toml"): 0o640,
		in.state: 0o700 | os.ModeDir,
		in.logs:  0o750 | os.ModeDir,
	} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("not installed: %v", err)
			continue
		}
		if got := fi.Mode() & (os.ModeDir | os.ModePerm); got != want {
			t.Errorf("%s: mode %v, want %v", strings.TrimPrefix(p, in.root), got, want)
		}
	}
	if real, err := filepath.EvalSymlinks(in.bin); err != nil || real != filepath.Join(in.libexec, "airlock") {
		t.Errorf("bin/airlock resolves to %q (%v), want the libexec binary", real, err)
	}
	if out, err := exec.Command(in.bin, "serve", "--check", "--config", filepath.Join(in.etc, "airlock.toml")).CombinedOutput(); err != nil {
		t.Errorf("the installed config does not pass serve --check: %v\n%s", err, out)
	}
	if out, err := exec.Command(in.bin, "policy", "check", filepath.Join(in.etc, "policies/coding-agent.toml")).CombinedOutput(); err != nil {
		t.Errorf("the installed example policy does not pass policy check: %v\n%s", err, out)
	}

	// An upgrade keeps the operator's edits.
	cfg := filepath.Join(in.etc, "airlock.toml")
	orig, _ := os.ReadFile(cfg)
	edited := append(bytes.Clone(orig), []byte("# edited by the operator\n")...)
	os.WriteFile(cfg, edited, 0o640)
	defer os.WriteFile(cfg, orig, 0o640)
	secrets := filepath.Join(in.etc, "secrets")
	if err := os.WriteFile(secrets, []byte("token=x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(secrets)
	fi, _ := os.Stat(secrets)
	secretsGID := fi.Sys().(*syscall.Stat_t).Gid
	if out, err := runMake(append([]string{"install-files"}, makeVars(in)...)...); err != nil {
		t.Fatalf("make install-files again: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(cfg); !bytes.Equal(got, edited) {
		t.Error("a second make install overwrote the operator's airlock.toml")
	}
	if fi, err := os.Stat(secrets); err != nil || fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Gid != secretsGID {
		t.Errorf("make install changed the operator's secrets file: %v %v", fi.Mode(), err)
	}

	// A package build: DESTDIR prefixes every path but appears in none.
	dest := t.TempDir()
	if out, err := runMake("install-files", "DESTDIR="+dest, "OUT="+in.out); err != nil {
		t.Fatalf("make install-files DESTDIR=: %v\n%s", err, out)
	}
	unit, err := os.ReadFile(filepath.Join(dest, "usr/local/lib/systemd/system/airlock.service"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(unit, []byte(dest)) || !bytes.Contains(unit, []byte("ExecStart=/usr/local/libexec/airlock/airlockd serve --config /etc/airlock/airlock.toml\n")) {
		t.Errorf("DESTDIR unit's ExecStart is wrong:\n%s", unit)
	}
	if l, err := os.Readlink(filepath.Join(dest, "usr/local/bin/airlock")); err != nil || l != "../libexec/airlock/airlock" {
		t.Errorf("DESTDIR bin/airlock links to %q (%v), want ../libexec/airlock/airlock", l, err)
	}
}

// TestSystemdUnitVerifies: `systemd-analyze verify` accepts the installed
// unit with no warning (it checks every directive and that the commands
// exist). When systemd is not PID 1 (containers, CI) this, and
// TestServeUnderTheUnitsConfinement, stand in for starting the unit.
func TestSystemdUnitVerifies(t *testing.T) {
	requireTools(t, "systemd-analyze")
	in := installTree(t)
	if b, _ := os.ReadFile("/proc/1/comm"); strings.TrimSpace(string(b)) != "systemd" {
		t.Logf("systemd is not PID 1 here (%q): the unit is verified offline, not started", strings.TrimSpace(string(b)))
	}
	out, err := exec.Command("systemd-analyze", "verify", in.unit).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", in.unit, err, out)
	}
	if out, err := exec.Command("systemd-analyze", "security", "--offline=yes", in.unit).CombinedOutput(); err == nil {
		if i := bytes.Index(out, []byte("Overall exposure level")); i >= 0 {
			t.Logf("%s", bytes.TrimSpace(out[i:]))
		}
	}
}

// TestLogrotateConfigParses: logrotate reads the installed snippet and
// would rotate the JSONL stream without copytruncate.
func TestLogrotateConfigParses(t *testing.T) {
	requireTools(t, "logrotate")
	in := installTree(t)
	b, err := os.ReadFile(in.logrotate)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("\tcopytruncate")) {
		t.Error("the logrotate snippet uses copytruncate: the appliance writes at its own offset")
	}
	out, err := exec.Command("logrotate", "-d", "-s", filepath.Join(t.TempDir(), "state"), in.logrotate).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("rotating pattern: "+filepath.Join(in.logs, "events.jsonl"))) || bytes.Contains(out, []byte("error")) {
		t.Fatalf("logrotate -d: %v\n%s", err, out)
	}
}

// unitDirective returns the value of key= in the unit.
func unitDirective(t *testing.T, unit, key string) string {
	t.Helper()
	f, err := os.Open(unit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+"="); ok {
			return v
		}
	}
	t.Fatalf("%s has no %s=", unit, key)
	return ""
}

// boundingSet turns the unit's CapabilityBoundingSet into setpriv's form.
func boundingSet(t *testing.T, unit string) string {
	caps := []string{"-all"}
	for _, c := range strings.Fields(unitDirective(t, unit, "CapabilityBoundingSet")) {
		caps = append(caps, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
	}
	return strings.Join(caps, ",")
}
