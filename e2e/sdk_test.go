package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"airlock/certs"
	"airlock/client"
	"airlock/e2e/world"
	"airlock/serve"
)

// sdkMaxSandboxes is sandbox.max of the SDK tests' appliance: the Python
// tests reach it to see QuotaExceeded.
const sdkMaxSandboxes = 3

// sdkAppliance is a real `airlock serve` binary (with airlock-init beside
// it, so commands go through the in-sandbox agent) for the SDK and MCP
// tests, on its own instance, pin directory and host guards.
type sdkAppliance struct {
	*appliance
	bin, instance, pinDir string
	tokens                map[string]string // principals of the TLS listener
}

// TestSDKs drives the Python SDK (pytest) and `airlock mcp` (the official
// TypeScript MCP client, over stdio and streamable HTTP) against one real
// appliance and Podman sandboxes.
func TestSDKs(t *testing.T) {
	requireAppliance(t)
	root := repoRoot()
	py := requirePytest(t)
	mcpTest := filepath.Join(root, "sdk", "mcp-test")
	if _, err := os.Stat(filepath.Join(mcpTest, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("the MCP test client is not installed: run `make sdk-deps` (npm ci in sdk/mcp-test; make test does): %v", err)
	}
	a := startSDKAppliance(t, startWorld(t))
	env := append(os.Environ(), "AIRLOCK_SOCKET="+a.socket, "AIRLOCK_URL=", "AIRLOCK_TOKEN=")
	t.Run("python", func(t *testing.T) {
		venv := filepath.Join(t.TempDir(), "venv")
		run(t, root, env, py, "-m", "venv", "--system-site-packages", venv)
		run(t, root, env, filepath.Join(venv, "bin", "pip"), "install", "--no-index", "--no-build-isolation", "./sdk/python")
		token, _ := os.ReadFile(filepath.Join(a.dir, "token"))
		penv := append(env, "AIRLOCK_TEST_TCP=https://127.0.0.1:"+strconv.Itoa(int(a.ports.control)),
			"AIRLOCK_TEST_TOKEN="+strings.TrimSpace(string(token)), "AIRLOCK_TEST_MAX_SANDBOXES="+strconv.Itoa(sdkMaxSandboxes),
			"AIRLOCK_TEST_CA_FILE="+a.caFile(), "AIRLOCK_TEST_FINGERPRINT="+a.leafFingerprint(t),
			"AIRLOCK_TEST_ALICE_TOKEN="+a.tokens["alice"], "AIRLOCK_TEST_BOB_TOKEN="+a.tokens["bob"])
		// From a directory of its own, so the installed package is tested.
		tests := filepath.Join(root, "sdk", "python", "tests")
		args := []string{"-m", "pytest", "-v", "-p", "no:cacheprovider", tests}
		if extra := os.Getenv("AIRLOCK_SDK_PYTEST_ARGS"); extra != "" { // e.g. "-k background"
			args = append(args[:len(args)-1], strings.Fields(extra)...)
		}
		run(t, t.TempDir(), penv, filepath.Join(venv, "bin", "python"), args...)
		example := readmeExample(t, filepath.Join(root, "sdk", "python", "README.md"))
		out := run(t, t.TempDir(), env, filepath.Join(venv, "bin", "python"), "-c", example)
		if !strings.Contains(out, "hi from the sandbox") || !strings.Contains(out, "denied:") {
			t.Errorf("the README example printed:\n%s", out)
		}
	})
	if n, _ := strconv.Atoi(os.Getenv("AIRLOCK_SDK_BENCH")); n > 0 {
		t.Run("bench", func(t *testing.T) { benchSDK(t, a, root, env, py, n) })
	}
	t.Run("mcp", func(t *testing.T) {
		run(t, mcpTest, append(env, "AIRLOCK_BIN="+a.bin, "AIRLOCK_MCP_TOKEN_FILE="+filepath.Join(a.dir, "token")),
			"node", "--test", "mcp.test.mjs", "mcp-http.test.mjs")
	})
}

// benchSDK measures `echo hi` round trips on one sandbox: the Go client
// and the Python SDK (the source tree, Debian's python3) in one run.
func benchSDK(t *testing.T, a *sdkAppliance, root string, env []string, py string, n int) {
	ctx := context.Background()
	sb, err := a.c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.c.Delete(ctx, sb.ID)
	token, _ := os.ReadFile(filepath.Join(a.dir, "token"))
	url := "https://127.0.0.1:" + strconv.Itoa(int(a.ports.control))
	remote, err := client.NewRemote(url, strings.TrimSpace(string(token)), client.TLSOptions{CAFile: a.caFile()})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		via string
		c   *client.Client
	}{{"unix socket", a.c}, {"TLS", remote}} {
		ds := make([]time.Duration, 0, n)
		for range n + 3 {
			start := time.Now()
			if _, err := c.c.Exec(ctx, sb.ID, client.ExecRequest{Shell: "echo hi"}, io.Discard, io.Discard); err != nil {
				t.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		ds = ds[3:]
		slices.Sort(ds)
		fmt.Printf("go client Exec(\"echo hi\") p50 %.1f ms (n=%d, %s)\n", float64(ds[n/2].Microseconds())/1000, n, c.via)
	}
	script := fmt.Sprintf(`import sys, time
sys.path.insert(0, %q)
import airlock
import os
for via, kw in (("unix socket", {}), ("TLS", {"url": %q, "token": os.environ["AIRLOCK_BENCH_TOKEN"], "ca_file": %q})):
    s = airlock.Sandbox.connect(%q, **kw)
    ts = []
    for i in range(%d + 3):
        t0 = time.perf_counter(); s.commands.run("echo hi"); ts.append(time.perf_counter() - t0)
    ts = sorted(ts[3:])
    print("python sdk commands.run(\"echo hi\") p50 %%.1f ms (n=%%d, %%s)" %% (ts[len(ts)//2]*1000, len(ts), via))
`, filepath.Join(root, "sdk", "python"), url, a.caFile(), sb.ID, n)
	fmt.Print(run(t, root, append(env, "AIRLOCK_BENCH_TOKEN="+strings.TrimSpace(string(token))), py, "-c", script))
}

// requirePytest returns Debian's python3, which must have pytest (make
// setup installs python3-pytest).
func requirePytest(t *testing.T) string {
	t.Helper()
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import pytest").CombinedOutput(); err != nil {
		t.Fatalf("%s has no pytest: run `make setup` (it installs python3-pytest): %v %s", py, err, out)
	}
	return py
}

// run runs a command and fails the test with its output if it fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s:\n%s", filepath.Base(name), strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return string(out)
}

// readmeExample is the first ```python block of the README.
func readmeExample(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```python\n")
	code, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatalf("%s has no ```python example", path)
	}
	return code
}

// startSDKAppliance writes the e2e config for w (with sandbox.max
// lowered), starts the built `airlock serve` and waits until it answers.
// It is stopped, and its kernel path torn down, when the test ends.
func startSDKAppliance(t *testing.T, w *world.World) *sdkAppliance {
	return startAgentAppliance(t, w, "sdk", func(cfg string) string {
		return strings.Replace(cfg, "\nmax = 8\n", "\nmax = "+strconv.Itoa(sdkMaxSandboxes)+"\n", 1)
	})
}

// startAgentAppliance is a built `airlock serve` with airlock-init beside
// it, on its own instance (name led by prefix), its config edited by edit.
func startAgentAppliance(t *testing.T, w *world.World, prefix string, edit func(string) string) *sdkAppliance {
	t.Helper()
	return startApplianceWith(t, w, prefix, edit, (*sdkAppliance).writePrincipals)
}

// startApplianceWith is startAgentAppliance with the principals file that
// principals writes (it returns its path and fills a.tokens).
func startApplianceWith(t *testing.T, w *world.World, prefix string, edit func(string) string,
	principals func(*sdkAppliance) (string, error)) *sdkAppliance {
	t.Helper()
	a := &sdkAppliance{appliance: &appliance{t: t, w: w}, bin: buildSDKBinaries(t),
		instance: prefix + w.ID, pinDir: "/sys/fs/bpf/airlock-" + prefix + w.ID}
	var err error
	if a.dir, err = os.MkdirTemp("", "airlock-"+prefix+"-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(a.dir) })
	if err := os.Chmod(a.dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := a.pickPool(); err != nil {
		t.Fatal(err)
	}
	if err := a.writeFiles(); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(a.config)
	if err != nil {
		t.Fatal(err)
	}
	pfile, err := principals(a)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(edit(string(cfg)), "\ntoken_file = ", fmt.Sprintf("\nprincipals_file = %q\ntoken_file = ", pfile), 1)
	if err := os.WriteFile(a.config, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	a.c = client.New(a.socket)
	a.serve()
	return a
}

// writePrincipals writes the TLS listener's principals: alice may run
// commands in her sandboxes; bob may hold one sandbox of the default
// image at a time, under the e2e policy only.
func (a *sdkAppliance) writePrincipals() (string, error) {
	a.tokens = map[string]string{}
	var b strings.Builder
	b.WriteString("version = 1\n")
	for _, p := range []struct{ name, quota string }{
		{"alice", ""},
		{"bob", fmt.Sprintf("[principals.bob.quota]\nsandboxes = 1\npolicies = [%q]\nimages = [%q]\n", PolicyName, debianImage)},
	} {
		tok, hash := serve.NewToken()
		a.tokens[p.name] = tok
		fmt.Fprintf(&b, "\n[principals.%s]\ntoken_sha256 = %q\nscopes = [\"sandbox:create\", \"sandbox:exec\", \"files\", \"logs:read\"]\n%s",
			p.name, hash, p.quota)
	}
	path := filepath.Join(a.dir, "principals.toml")
	return path, os.WriteFile(path, []byte(b.String()), 0o600)
}

func (a *sdkAppliance) caFile() string { return filepath.Join(a.dir, "state", certs.CertFile) }

// leafFingerprint is the SHA-256 of the certificate the TLS listener
// presents, verified under the appliance CA.
func (a *sdkAppliance) leafFingerprint(t *testing.T) string {
	t.Helper()
	pem, err := os.ReadFile(a.caFile())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(int(a.ports.control)), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("the control listener's TLS under the appliance CA: %v", err)
	}
	defer conn.Close()
	return serve.Fingerprint(conn.ConnectionState().PeerCertificates[0].Raw)
}

func (a *sdkAppliance) flags() []string {
	return []string{"--config", a.config, "--instance", a.instance, "--pin-dir", a.pinDir}
}

func (a *sdkAppliance) serve() {
	t := a.t
	a.logFile = filepath.Join(a.dir, "serve.log")
	logf, err := os.Create(a.logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(a.bin, append([]string{"serve", "--log-level", "debug"}, a.flags()...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		td := exec.Command(a.bin, append([]string{"serve", "--teardown"}, a.flags()...)...)
		if out, err := td.CombinedOutput(); err != nil {
			t.Errorf("airlock serve --teardown: %v\n%s", err, out)
		}
		if t.Failed() {
			t.Logf("appliance log (tail):\n%s", a.tail(80))
		}
	})
	a.waitHealthy(exited)
}

// buildSDKBinaries is the full build, airlockd, with airlock-init beside
// it (buildAirlock's).
func buildSDKBinaries(t *testing.T) string {
	t.Helper()
	return filepath.Join(filepath.Dir(airlockBinary(t)), "airlockd")
}
