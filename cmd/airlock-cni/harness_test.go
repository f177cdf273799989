package main

// The conformance harness: a node agent (serve.Start in node mode, in
// this process) over a hermetic world netns, the airlock-cni binary built
// from this package, Debian's ptp and host-local plugins, and libcni
// driving a chained conflist as a runtime would, on network namespaces
// the test creates. Every netns, veth, pin and guard is removed at the
// end, pass or fail.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"

	"airlock/bpf"
	"airlock/client"
	"airlock/e2e/world"
	"airlock/runner"
	"airlock/serve"
)

const debianCNI = "/usr/lib/cni"

type node struct {
	t        *testing.T
	w        *world.World
	dir      string
	bin      string // holds airlock-cni
	socket   string
	pool     netip.Prefix
	gw       netip.Addr
	instance string
	pinDir   string
	guard    bpf.GuardConfig
	cfgPath  string
	cni      *libcni.CNIConfig
	app      *serve.Appliance
	stop     context.CancelFunc
	served   chan error
}

func requireNode(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (network namespaces, eBPF, nftables)")
	}
	for _, p := range []string{"ptp", "host-local"} {
		if _, err := os.Stat(filepath.Join(debianCNI, p)); err != nil {
			t.Skipf("skipping: Debian's CNI plugin %s is not installed (apt-get install containernetworking-plugins; make setup)", p)
		}
	}
	if err := bpf.Probe(); err != nil {
		t.Skipf("skipping: kernel lacks a feature the path needs: %v", err)
	}
}

func newNode(t *testing.T) *node {
	requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := world.Start(ctx, world.Options{})
	if err != nil {
		t.Fatalf("start the world: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	n := &node{t: t, w: w, instance: "cni" + w.ID, pinDir: "/sys/fs/bpf/airlock-cni-" + w.ID}
	// 4000-4899: no other test picks tables there (serve 2000+, e2e 3000+, bpf 20000+).
	n.guard = bpf.GuardConfig{Table: 4000 + rand.IntN(900), NFTTable: "airlock-cni-" + w.ID}
	n.guard.RulePriority = n.guard.Table
	if n.dir, err = os.MkdirTemp("", "airlock-cni-test-"); err != nil {
		t.Fatal(err)
	}
	os.Chmod(n.dir, 0o711) // runtime_dir below it must be searchable
	t.Cleanup(func() { os.RemoveAll(n.dir) })
	t.Cleanup(n.teardownPath)
	restoreForwarding(t)
	n.bin = filepath.Join(n.dir, "bin")
	n.socket = filepath.Join(n.dir, "airlock.sock")
	n.buildPlugin()
	n.pickPool()
	n.writeFiles()
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{n.bin, debianCNI}, filepath.Join(n.dir, "cache"), nil)
	return n
}

// restoreForwarding puts net.ipv4.ip_forward back: ptp turns it on.
func restoreForwarding(t *testing.T) {
	const p = "/proc/sys/net/ipv4/ip_forward"
	old, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(p, old, 0o644) })
}

func (n *node) buildPlugin() {
	out, err := exec.Command("go", "build", "-o", filepath.Join(n.bin, "airlock-cni"), ".").CombinedOutput()
	if err != nil {
		n.t.Fatalf("build airlock-cni: %v\n%s", err, out)
	}
}

// pickPool chooses a /24 in 198.19.128.0/17 that no address or route uses.
func (n *node) pickPool() {
	routes, _ := netlink.RouteList(nil, netlink.FAMILY_V4)
	addrs, _ := netlink.AddrList(nil, netlink.FAMILY_V4)
	used := func(p netip.Prefix) bool {
		for _, r := range routes {
			if r.Dst != nil && !r.Dst.IP.IsUnspecified() {
				if a, ok := netip.AddrFromSlice(r.Dst.IP); ok && p.Contains(a.Unmap()) {
					return true
				}
			}
		}
		for _, ad := range addrs {
			if ip, ok := netip.AddrFromSlice(ad.IP); ok && p.Contains(ip.Unmap()) {
				return true
			}
		}
		return p.Overlaps(n.w.Prefix)
	}
	for range 64 {
		third := byte(128 + rand.IntN(120))
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, third, 0}), 24)
		if !used(p) {
			n.pool, n.gw = p, netip.AddrFrom4([4]byte{198, 19, third, 1})
			return
		}
	}
	n.t.Fatal("no free pod range in 198.19.128.0/17")
}

// Policies: "lab" allows the world's npm registry, "strict" allows
// nothing; both deny the evil host by name.
func (n *node) policies() map[string]string {
	evil, npm := n.w.Name(world.RoleEvil), n.w.Name(world.RoleNPM)
	return map[string]string{
		"lab": fmt.Sprintf("version = 1\nmode = \"enforce\"\n\n[deny]\nhosts = [%q]\n\n[categories.registries]\nhosts = [%q]\n", evil, npm),
		"strict": fmt.Sprintf("version = 1\nmode = \"enforce\"\n\n[deny]\nhosts = [%q]\n\n[categories.registries]\nhosts = [%q]\n",
			evil, "nothing.example.test"),
	}
}

func (n *node) writeFiles() {
	os.MkdirAll(filepath.Join(n.dir, "policies"), 0o700)
	for name, body := range n.policies() {
		if err := os.WriteFile(filepath.Join(n.dir, "policies", name+".toml"), []byte(body), 0o600); err != nil {
			n.t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(n.dir, "state"), 0o755)
	cfg := fmt.Sprintf(`version = 1
state_dir = %q
runtime_dir = %q
policy_dir = %q
default_policy = "lab"

[network]
pool = "%s"
gateway = "%s"

[control]
socket = %q
group = "root"

[upstream]
resolvers = ["%s"]
allow = ["%s"]
ca_files = [%q]

[audit]
jsonl = %q
`, filepath.Join(n.dir, "state"), filepath.Join(n.dir, "run"), filepath.Join(n.dir, "policies"), n.pool, n.gw,
		n.socket, n.w.DNSAddr(), n.w.Prefix, n.w.CAFile, n.events())
	n.cfgPath = filepath.Join(n.dir, "airlock.toml")
	if err := os.WriteFile(n.cfgPath, []byte(cfg), 0o600); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) events() string { return filepath.Join(n.dir, "events.jsonl") }

// start runs a node agent until stopAgent (or the test's end).
func (n *node) start() {
	t := n.t
	cfg, err := serve.Load(n.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	app, err := serve.Start(ctx, cfg, serve.Options{Node: true, Instance: n.instance, PinDir: n.pinDir, Guard: n.guard,
		Version: "test"})
	if err != nil {
		cancel()
		t.Fatalf("start the node agent: %v", err)
	}
	n.app, n.stop, n.served = app, cancel, make(chan error, 1)
	go func() { n.served <- app.Serve(ctx) }()
	t.Cleanup(n.stopAgent)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := client.New(n.socket).NodeStatus(context.Background()); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the node agent's socket did not answer")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopAgent stops the agent as a crash would leave the node: pins, links
// and guards stay.
func (n *node) stopAgent() {
	if n.app == nil {
		return
	}
	n.stop()
	<-n.served
	if err := n.app.Close(); err != nil {
		n.t.Errorf("close the node agent: %v", err)
	}
	n.app = nil
}

func (n *node) teardownPath() {
	if _, err := os.Stat(n.pinDir); err != nil {
		return
	}
	g := n.guard
	g.IfacePrefix = runner.VethPrefix
	if p, err := bpf.Reopen(n.pinDir, bpf.Options{Guard: g}); err == nil {
		if err := p.Teardown(); err != nil {
			n.t.Errorf("tear down the kernel path: %v", err)
		}
	}
	os.RemoveAll(n.pinDir)
}

// conflist is the chain a node's runtime reads: Debian's ptp with
// host-local as the main network, and airlock-cni chained after it by
// `airlock-cni install`, loaded from the conf dir as a runtime would.
func (n *node) conflist(version string) *libcni.NetworkConfigList {
	t := n.t
	main := map[string]any{
		"cniVersion": version, "name": "airlock-test-" + n.w.ID,
		"plugins": []any{
			map[string]any{"type": "ptp", "ipam": map[string]any{
				"type": "host-local", "ranges": [][]map[string]string{{{"subnet": n.pool.String(), "gateway": n.gw.String()}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": filepath.Join(n.dir, "ipam")}},
		},
	}
	confDir := filepath.Join(n.dir, "net.d")
	os.MkdirAll(confDir, 0o755)
	b, _ := json.Marshal(main)
	if err := os.WriteFile(filepath.Join(confDir, "10-ptp.conflist"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(n.bin, "airlock-cni"), "install", "--bin-dir", n.bin, "--conf-dir", confDir,
		"--socket", n.socket).CombinedOutput()
	if err != nil {
		t.Fatalf("airlock-cni install: %v\n%s", err, out)
	}
	list, err := libcni.ConfListFromFile(filepath.Join(confDir, OwnConflist))
	if err != nil {
		t.Fatalf("load the installed conflist: %v", err)
	}
	if got := list.Plugins[len(list.Plugins)-1].Network.Type; len(list.Plugins) != 2 || got != "airlock-cni" {
		t.Fatalf("installed conflist: %d plugins, last %q; want ptp then airlock-cni", len(list.Plugins), got)
	}
	return list
}

// soloList is airlock-cni alone at CNI 1.1.0, for the verbs Debian's
// ptp (spec 1.0.0) does not know: GC and STATUS.
func (n *node) soloList() *libcni.NetworkConfigList {
	return n.parseList(map[string]any{"cniVersion": "1.1.0", "name": "airlock-solo-" + n.w.ID,
		"plugins": []any{n.airlockConf()}})
}

func (n *node) airlockConf() map[string]any {
	return map[string]any{"type": "airlock-cni", "socket": n.socket,
		"capabilities": map[string]bool{annotationsCap: true}}
}

func (n *node) parseList(l map[string]any) *libcni.NetworkConfigList {
	b, err := json.Marshal(l)
	if err != nil {
		n.t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		n.t.Fatalf("conflist: %v", err)
	}
	return list
}

// pod is one network namespace the test attaches, as a runtime would.
type pod struct {
	n    *node
	ns   ns.NetNS
	name string // under /run/netns, for ip netns exec
	rt   *libcni.RuntimeConf
}

func (n *node) newPod(name, policy string) *pod {
	t := n.t
	netns, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	p := &pod{n: n, ns: netns, name: filepath.Base(netns.Path())}
	etc := filepath.Join("/etc/netns", p.name)
	t.Cleanup(func() {
		os.RemoveAll(etc)
		netns.Close()
		testutils.UnmountNS(netns)
	})
	os.MkdirAll(etc, 0o755)
	os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte("nameserver "+n.gw.String()+"\noptions timeout:2 attempts:2\n"), 0o644)
	p.rt = &libcni.RuntimeConf{ContainerID: "ctr-" + p.name, NetNS: netns.Path(), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}}}
	if policy != "" {
		p.rt.CapabilityArgs = map[string]any{annotationsCap: map[string]string{PolicyAnnotation: policy}}
	}
	return p
}

func (p *pod) id() string { return client.PodID(p.rt.ContainerID, p.rt.IfName) }

// exec runs argv inside the pod's netns (its resolv.conf names the
// gateway, which dnsd answers through the steering).
func (p *pod) exec(argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", p.name}, argv...)...).CombinedOutput()
	return string(out), err
}

// curl fetches url from inside the pod, trusting the node's CA (the
// proxy inspects TLS), and returns the HTTP status (000: no response).
func (p *pod) curl(url string, extra ...string) string {
	argv := append([]string{"curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "8",
		"--cacert", filepath.Join(p.n.dir, "state", "ca.crt")}, extra...)
	out, _ := p.exec(append(argv, url)...)
	code := strings.TrimSpace(lastLine(out))
	if code == "000" || code == "403" {
		p.n.t.Logf("pod %s: curl %s: %s", p.name, url, strings.TrimSpace(out))
	}
	return code
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// hasLink reports whether the pod's netns has an interface named name.
func (p *pod) hasLink(name string) bool {
	found := false
	_ = p.ns.Do(func(ns.NetNS) error {
		_, err := netlink.LinkByName(name)
		found = err == nil
		return nil
	})
	return found
}

// event is what the tests read of a JSONL record.
type event struct {
	Kind      string `json:"kind"`
	Sandbox   string `json:"sandbox"`
	Verdict   string `json:"verdict"`
	Rule      string `json:"rule"`
	Reason    string `json:"reason"`
	Lifecycle *struct {
		Stage  string `json:"stage"`
		State  string `json:"state"`
		Policy string `json:"policy"`
	} `json:"lifecycle"`
}

// waitEvent waits for a JSONL record matching ok.
func (n *node) waitEvent(what string, ok func(event) bool) event {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(n.events())
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) == nil && ok(e) {
				return e
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.t.Fatalf("no event %s in %s", what, n.events())
	return event{}
}

// leftovers lists what the kernel path and the host still hold for the
// test's pods: pinned links, alk- links tagged as this node's pods.
func (n *node) leftovers() []string {
	var out []string
	if es, err := os.ReadDir(filepath.Join(n.pinDir, "v2", "links")); err == nil {
		for _, e := range es {
			out = append(out, "pin "+e.Name())
		}
	}
	links, _ := netlink.LinkList()
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Alias, "airlock-pod:"+n.instance+":") {
			out = append(out, "link "+l.Attrs().Name)
		}
	}
	return out
}

// cniCode is the CNI error code of err (0 when it is not a CNI error).
func cniCode(err error) uint {
	var ce *types.Error
	if errors.As(err, &ce) {
		return ce.Code
	}
	return 0
}

func addrOf(ipc *current.IPConfig) netip.Addr {
	a, _ := netip.AddrFromSlice(ipc.Address.IP.To4())
	return a
}
