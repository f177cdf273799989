package e2e

import (
	"bytes"
	_ "embed"
	"fmt"
	"net/netip"
	"text/template"

	"airlock/e2e/world"
)

//go:embed testdata/e2e-policy.toml.tmpl
var policyTemplate string

//go:embed testdata/probe.py
var ProbeScript []byte

// PolicyName is the name the test policy is installed under.
const PolicyName = "e2e"

// PolicyAddrs are the world addresses the test policy names.
type PolicyAddrs struct {
	NPM, PyPI, Git, API, Hooks, Evil, Canary netip.Addr
}

// AddrsOf returns the addresses of a running world.
func AddrsOf(w *world.World) PolicyAddrs {
	return PolicyAddrs{
		NPM: w.Addr(world.RoleNPM), PyPI: w.Addr(world.RolePyPI), Git: w.Addr(world.RoleGit),
		API: w.Addr(world.RoleAPI), Hooks: w.Addr(world.RoleHooks), Evil: w.Addr(world.RoleEvil),
		Canary: w.Addr(world.RoleCanary),
	}
}

// RenderPolicy renders the test policy for a world's addresses.
func RenderPolicy(a PolicyAddrs) ([]byte, error) {
	t, err := template.New("policy").Option("missingkey=error").Parse(policyTemplate)
	if err != nil {
		return nil, fmt.Errorf("e2e: policy template: %w", err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, a); err != nil {
		return nil, fmt.Errorf("e2e: policy template: %w", err)
	}
	return b.Bytes(), nil
}
