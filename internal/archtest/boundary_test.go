// Package archtest holds tests of the repository's shape: the package
// boundaries of docs/DESIGN.md's table, checked on the real import graph.
package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// buildTags are the Makefile's tags plus tools, so internal/deps (the
// pinned dependency list) is part of the graph.
const buildTags = "remote,exclude_graphdriver_btrfs,btrfs_noversion,exclude_graphdriver_devicemapper,containers_image_openpgp,tools"

// pkg is what `go list -json` tells about one package of the module.
type pkg struct {
	ImportPath   string
	Imports      []string // product code, direct
	TestImports  []string
	XTestImports []string
	Deps         []string // product code, transitive
	Error        *struct{ Err string }
}

// rule forbids an edge: packages under from must not import what bans
// names. Direct rules look at the package's own imports (tests included
// when tests is set); transitive rules at everything it links.
type rule struct {
	name       string
	from       func(path string) bool
	bans       func(imp string) bool
	transitive bool
	tests      bool
}

func under(roots ...string) func(string) bool {
	return func(p string) bool {
		for _, r := range roots {
			if p == r || strings.HasPrefix(p, r+"/") {
				return true
			}
		}
		return false
	}
}

func exactly(paths ...string) func(string) bool {
	return func(p string) bool { return slices.Contains(paths, p) }
}

func either(a, b func(string) bool) func(string) bool {
	return func(p string) bool { return a(p) || b(p) }
}

func not(f func(string) bool) func(string) bool { return func(p string) bool { return !f(p) } }

const podmanBindings = "github.com/containers/podman/v5"

// rules are DESIGN.md's "knows nothing of" column, as imports.
var rules = []rule{
	{
		// policies decides; it opens no socket and writes no log. Its
		// parsing imports (net/netip, net/textproto, net/url) stay allowed.
		name: "policies imports no sockets or logging",
		from: under("airlock/policies"),
		bans: either(exactly("net", "syscall", "log", "log/slog"),
			under("net/http", "net/rpc", "net/smtp", "golang.org/x/sys", "golang.org/x/net/ipv4", "golang.org/x/net/ipv6")),
	},
	{
		name:       "policies links no mechanism (goproxy, miekg/dns, ebpf, podman, netlink)",
		from:       under("airlock/policies"),
		bans:       under("github.com/elazarl/goproxy", "github.com/miekg/dns", "github.com/cilium/ebpf", podmanBindings, "github.com/vishvananda/netlink", "github.com/google/nftables"),
		transitive: true,
	},
	{
		name:  "only runner/podman (and internal/deps) imports the Podman bindings",
		from:  not(under("airlock/runner/podman", "airlock/internal/deps")),
		bans:  under(podmanBindings),
		tests: true,
	},
	{
		name:       "proxy and dnsd link neither bpf nor runner (nor serve)",
		from:       under("airlock/proxy", "airlock/dnsd"),
		bans:       under("airlock/bpf", "airlock/runner", "airlock/serve", "github.com/cilium/ebpf", podmanBindings),
		transitive: true,
	},
}

// violations lists every forbidden edge of pkgs, one line each.
func violations(pkgs []pkg, rules []rule) []string {
	var out []string
	for _, p := range pkgs {
		for _, r := range rules {
			if !r.from(p.ImportPath) {
				continue
			}
			imps := p.Imports
			switch {
			case r.transitive:
				imps = p.Deps
			case r.tests:
				imps = slices.Concat(p.Imports, p.TestImports, p.XTestImports)
			}
			for _, imp := range imps {
				if r.bans(imp) {
					out = append(out, fmt.Sprintf("%s imports %s: breaks %q", p.ImportPath, imp, r.name))
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// list runs go list over the whole module.
func list(t *testing.T) []pkg {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to list the import graph: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-e", "-tags", buildTags,
		"-json=ImportPath,Imports,TestImports,XTestImports,Deps,Error", "airlock/...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Errorf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// The module's import graph keeps to DESIGN.md's package table.
func TestImportBoundaries(t *testing.T) {
	pkgs := list(t)
	for _, want := range []string{"airlock/policies", "airlock/proxy", "airlock/dnsd", "airlock/runner/podman", "airlock/internal/deps"} {
		if !slices.ContainsFunc(pkgs, func(p pkg) bool { return p.ImportPath == want }) {
			t.Fatalf("go list did not list %s: the graph checked is not the module's", want)
		}
	}
	for _, v := range violations(pkgs, rules) {
		t.Error(v)
	}
}

// Each rule catches the edge it names, and lets through what it allows.
func TestRulesCatchForbiddenEdges(t *testing.T) {
	graph := []pkg{
		{ImportPath: "airlock/policies", Imports: []string{"net/netip", "net/textproto", "net"}},
		{ImportPath: "airlock/policies/x", Imports: []string{"log/slog"}, Deps: []string{"github.com/miekg/dns"}},
		{ImportPath: "airlock/serve", Imports: []string{"airlock/runner/podman"}, TestImports: []string{podmanBindings + "/pkg/bindings"}},
		{ImportPath: "airlock/runner/podman", Imports: []string{podmanBindings + "/pkg/bindings"}},
		{ImportPath: "airlock/internal/deps", Imports: []string{podmanBindings + "/pkg/bindings"}},
		{ImportPath: "airlock/dnsd/internal/upstream", Deps: []string{"airlock/runner", "net"}},
		{ImportPath: "airlock/proxy", Deps: []string{"airlock/audit", "airlock/bpf"}},
	}
	got := violations(graph, rules)
	want := []string{
		`airlock/dnsd/internal/upstream imports airlock/runner: breaks "proxy and dnsd link neither bpf nor runner (nor serve)"`,
		`airlock/policies imports net: breaks "policies imports no sockets or logging"`,
		`airlock/policies/x imports github.com/miekg/dns: breaks "policies links no mechanism (goproxy, miekg/dns, ebpf, podman, netlink)"`,
		`airlock/policies/x imports log/slog: breaks "policies imports no sockets or logging"`,
		`airlock/proxy imports airlock/bpf: breaks "proxy and dnsd link neither bpf nor runner (nor serve)"`,
		`airlock/serve imports github.com/containers/podman/v5/pkg/bindings: breaks "only runner/podman (and internal/deps) imports the Podman bindings"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// thinBans is what bin/airlock-cli, the thin build of cmd/airlock (-tags
// airlock_thin, the CLI bin/airlock hands every command but exec to), must not
// link: Go runs every linked package's init before main, and the
// appliance's packages are what made the CLI slow to start. Its appliance
// commands exec bin/airlockd instead. Of audit it links only the event
// schema (audit/schema), of policies nothing.
var thinBans = either(exactly("airlock/audit"), under("airlock/serve", "airlock/proxy", "airlock/dnsd", "airlock/bpf", "airlock/runner",
	"airlock/policies", "airlock/certs", "airlock/preview", "airlock/internal/mcptools",
	podmanBindings, "github.com/elazarl/goproxy", "github.com/miekg/dns", "github.com/cilium/ebpf",
	"modernc.org/sqlite", "github.com/prometheus/client_golang", "google.golang.org/protobuf"))

// goList is `go list -json=ImportPath,Deps` of one package, statically
// built (CGO_ENABLED=0) with tags.
func goList(t *testing.T, tags, path string) pkg {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to list the import graph: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-tags", tags, "-json=ImportPath,Deps", path)
	cmd.Dir = "../.."
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var p pkg
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("go list output: %v", err)
	}
	return p
}

// bin/airlock, the front (cmd/airlock-front), runs `airlock sandbox exec`
// in the time a process takes to start: it links no HTTP or TLS stack, no
// command tree, and nothing thin CLI may not.
func TestFrontLinksNoHTTP(t *testing.T) {
	p := goList(t, "", "airlock/cmd/airlock-front")
	if !slices.Contains(p.Deps, "airlock/internal/clifront") || !slices.Contains(p.Deps, "airlock/client/wire") {
		t.Fatalf("the front links neither airlock/internal/clifront nor airlock/client/wire: the graph checked is not the front's (%d deps)", len(p.Deps))
	}
	bans := either(thinBans, either(exactly("net/http", "crypto/tls", "airlock/client"), under("github.com/spf13")))
	r := rule{name: "the front links no HTTP stack and no command tree", from: exactly("airlock/cmd/airlock-front"), bans: bans, transitive: true}
	for _, v := range violations([]pkg{p}, []rule{r}) {
		t.Error(v)
	}
}

// The thin CLI links none of the appliance, nor the audit store, the
// metrics or the policy engine.
func TestThinCLILinksNoAppliance(t *testing.T) {
	p := goList(t, "airlock_thin", "airlock/cmd/airlock")
	if !slices.Contains(p.Deps, "airlock/client") || !slices.Contains(p.Deps, "github.com/spf13/cobra") {
		t.Fatalf("the thin build links neither airlock/client nor cobra: the graph checked is not the CLI's (%d deps)", len(p.Deps))
	}
	r := rule{name: "the thin CLI links none of the appliance", from: exactly("airlock/cmd/airlock"), bans: thinBans, transitive: true}
	for _, v := range violations([]pkg{p}, []rule{r}) {
		t.Error(v)
	}
}
