package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/containernetworking/cni/libcni"

	"airlock/e2e/world"
)

// TestScale measures, with the agent confined to the DaemonSet's
// capabilities: the chain's ADD (ptp + airlock-cni) against ptp's alone
// over pods created one after another; then many pods attached at once,
// every one steered (its DNS answered by dnsd, a registry fetch through
// the proxy), the agent's RSS; and that DEL of all leaves no pin, no TC
// link of the steering program and no pod link. AIRLOCK_CNI_MEASURE=1
// runs the sizes (100 in a row, 200 at once); the default is
// smaller so `make test` stays quick.
func TestScale(t *testing.T) {
	requireNode(t)
	seq, burst := 10, 24
	if os.Getenv("AIRLOCK_CNI_MEASURE") == "1" {
		seq, burst = 100, 200
	}
	n := newNode(t)
	agent := buildAgent(t, n.dir)
	n.guardAsCLI()
	chain, plain := n.conflist("1.0.0"), n.ptpOnly()
	stop, pid, err := n.startConfinedPID(agent, daemonSetCaps(t))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	withPtp := n.timeAdds(chain, seq, "seq")
	ptpOnly := n.timeAdds(plain, seq, "ptp")
	t.Logf("ADD over %d pods in a row: chain p50 %v p99 %v; ptp alone p50 %v p99 %v; added p50 %v",
		seq, pct(withPtp, 50), pct(withPtp, 99), pct(ptpOnly, 50), pct(ptpOnly, 99), pct(withPtp, 50)-pct(ptpOnly, 50))
	pods := n.burst(chain, burst)
	t.Logf("%d pods attached at once; agent RSS %s", burst, rss(pid))
	n.checkSteered(t, pods)
	for _, p := range pods {
		if err := n.cni.DelNetworkList(context.Background(), chain, p.rt); err != nil {
			t.Fatalf("DEL %s: %v", p.name, err)
		}
	}
	if left := n.leftovers(); len(left) > 0 {
		t.Fatalf("after DEL of all: %v", left)
	}
	if k := n.steeringLinks(t); k != 0 {
		t.Fatalf("after DEL of all: %d TC links of the steering program remain", k)
	}
	t.Logf("after DEL of all %d: 0 pins, 0 TC links of the steering program, 0 pod links "+
		"(the host guards are per node, not per pod: 1 input and 2 forward rules stay while the agent is installed)", burst)
}

// guardAsCLI names the guards as cmd/airlock's guardFor(instance) does,
// for the agent run as `airlock serve --instance`.
func (n *node) guardAsCLI() {
	h := fnvSum(n.instance)
	n.guard.Table = 2000 + int(h%1000)
	n.guard.RulePriority, n.guard.NFTTable = n.guard.Table, "airlock-"+n.instance
}

// ptpOnly is the main network alone (the baseline for ADD's cost).
func (n *node) ptpOnly() *libcni.NetworkConfigList {
	return n.parseList(map[string]any{"cniVersion": "1.0.0", "name": "ptp-only-" + n.w.ID,
		"plugins": []any{map[string]any{"type": "ptp", "ipam": map[string]any{
			"type": "host-local", "ranges": [][]map[string]string{{{"subnet": n.pool.String(), "gateway": n.gw.String()}}},
			"dataDir": filepath.Join(n.dir, "ipam")}}}})
}

// timeAdds creates k pods in a row on list, timing each ADD, and DELs
// them again.
func (n *node) timeAdds(list *libcni.NetworkConfigList, k int, tag string) []time.Duration {
	var ds []time.Duration
	for i := range k {
		p := n.newPod(fmt.Sprintf("%s-%d", tag, i), "")
		t0 := time.Now()
		if _, err := n.cni.AddNetworkList(context.Background(), list, p.rt); err != nil {
			n.t.Fatalf("ADD %s: %v", p.name, err)
		}
		ds = append(ds, time.Since(t0))
		if err := n.cni.DelNetworkList(context.Background(), list, p.rt); err != nil {
			n.t.Fatalf("DEL %s: %v", p.name, err)
		}
	}
	return ds
}

// burst attaches k pods at once (8 ADDs in flight).
func (n *node) burst(list *libcni.NetworkConfigList, k int) []*pod {
	pods := make([]*pod, k)
	for i := range pods {
		pods[i] = n.newPod(fmt.Sprintf("burst-%d", i), "")
	}
	errs := make(chan error, k)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := n.cni.AddNetworkList(context.Background(), list, p.rt); err != nil {
				errs <- fmt.Errorf("ADD %s: %w", p.name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		n.t.Fatal(err)
	}
	return pods
}

// checkSteered fetches the registry from every pod (by name: dnsd answers,
// the proxy forwards), 8 at a time.
func (n *node) checkSteered(t *testing.T, pods []*pod) {
	var mu sync.Mutex
	var failed []string
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if code := p.curl(n.w.URL(world.RoleNPM) + "/burst-" + strconv.Itoa(i)); code == "000" || code == "403" {
				mu.Lock()
				failed = append(failed, p.name+":"+code)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d of %d pods not steered to the registry: %v", len(failed), len(pods), failed)
	}
}

// steeringLinks counts the kernel's links that run the pinned steering
// program.
func (n *node) steeringLinks(t *testing.T) int {
	prog, err := ebpf.LoadPinnedProgram(filepath.Join(n.pinDir, "v2", "prog_steer"), nil)
	if err != nil {
		t.Fatalf("the pinned steering program: %v", err)
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := info.ID()
	count := 0
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		if li, err := it.Link.Info(); err == nil && li.Program == want {
			count++
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return count
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

func rss(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:"))
		}
	}
	return "unknown"
}
