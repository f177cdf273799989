package e2e

import (
	"net/netip"
	"strings"
	"testing"

	"airlock/e2e/world"
	"airlock/policies"
)

// sampleEnv is an Env with fixed addresses, for tests that need no world.
func sampleEnv() Env {
	return Env{
		Canary: netip.MustParseAddr("198.19.7.99"), Canary6: netip.MustParseAddr("2001:2:0:7::63"),
		Evil: netip.MustParseAddr("198.19.7.66"), NPM: netip.MustParseAddr("198.19.7.10"),
		Git: netip.MustParseAddr("198.19.7.12"), API: netip.MustParseAddr("198.19.7.13"),
		Hooks: netip.MustParseAddr("198.19.7.14"), WorldDNS: netip.MustParseAddr("198.19.7.53"),
		Registry: "registry.example.test", PyPI: "pypi.pkg.example.test", GitHost: "git.example.test",
		APIHost: "api.staging.example.test", HooksHost: "hooks.example.test",
		Gateway: netip.MustParseAddr("198.18.200.1"), Peer: netip.MustParseAddr("198.18.200.3"),
		ProxyPort: 15001, ExplicitPort: 3128, ControlPort: 7443, MetricsPort: 9464,
		ControlSocket: "/run/airlock-e2e/airlock.sock", Probe: "python3 /tmp/airlock-probe.py",
	}
}

func TestAttemptTable(t *testing.T) {
	if len(Attempts) < 40 {
		t.Errorf("%d attempts; the suite needs at least 40", len(Attempts))
	}
	names := map[string]bool{}
	perClass := map[Class]int{}
	env := sampleEnv()
	for _, a := range Attempts {
		if names[a.Name] {
			t.Errorf("duplicate attempt name %q", a.Name)
		}
		names[a.Name] = true
		perClass[a.Class]++
		if a.Refused == "" {
			t.Errorf("%s: says nothing about what refused means", a.Name)
		}
		cmd, err := env.Expand(a, "m00abcd")
		if err != nil {
			t.Errorf("%s: %v", a.Name, err)
			continue
		}
		if strings.Contains(cmd, "{{") {
			t.Errorf("%s: unexpanded: %s", a.Name, cmd)
		}
		if _, err := env.ExpandLog(a, "m00abcd"); err != nil {
			t.Errorf("%s: log: %v", a.Name, err)
		}
		if a.Raw != "" && !strings.Contains(a.Cmd, "{{raw}}") {
			t.Errorf("%s: has a raw request but never sends it", a.Name)
		}
	}
	for _, c := range Classes {
		if perClass[c] == 0 {
			t.Errorf("class %s has no attempt", c)
		}
	}
	for c := range perClass {
		found := false
		for _, k := range Classes {
			found = found || k == c
		}
		if !found {
			t.Errorf("class %q is not in Classes", c)
		}
	}
}

func TestExpandRejectsUnknownPlaceholders(t *testing.T) {
	if _, err := sampleEnv().Expand(Attempt{Name: "x", Cmd: "curl {{nosuch}}"}, "m"); err == nil {
		t.Error("an unknown placeholder expanded")
	}
	got, err := sampleEnv().Expand(Attempt{Name: "x", Cmd: "{{canaryint}} {{canaryhex}} {{canaryoct}} {{canaryshort}}"}, "m")
	if err != nil {
		t.Fatal(err)
	}
	// 198.19.7.99 in four spellings.
	if want := "3323135843 0xc6130763 0306.023.07.0143 198.19.1891"; got != want {
		t.Errorf("encodings = %q, want %q", got, want)
	}
}

func TestProbeScriptMarkers(t *testing.T) {
	for _, m := range []string{world.CanaryBody, world.EvilBody, "world-txt"} {
		if !strings.Contains(string(ProbeScript), m) {
			t.Errorf("probe.py does not recognise the world's marker %q", m)
		}
	}
}

func TestPolicyRendersAndPassesItsTests(t *testing.T) {
	e := sampleEnv()
	src, err := RenderPolicy(PolicyAddrs{NPM: e.NPM, PyPI: netip.MustParseAddr("198.19.7.11"), Git: e.Git,
		API: e.API, Hooks: e.Hooks, Evil: e.Evil, Canary: e.Canary})
	if err != nil {
		t.Fatal(err)
	}
	p, err := policies.Parse("e2e.toml", src)
	if err != nil {
		t.Fatalf("the e2e policy does not load: %v", err)
	}
	for _, r := range p.RunTests() {
		if !r.Pass {
			t.Errorf("policy test %q: %v", r.Case.Name, r.Problems)
		}
	}
}
