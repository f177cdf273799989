package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"airlock/client"
	"airlock/e2e/world"
)

// TestDaemonSetCapabilities runs `airlock serve --node` as the DaemonSet
// does: with only the capabilities deploy/kubernetes/daemonset.yaml adds,
// its own /proc/sys read-only and the host's mounted elsewhere
// (--proc-sys). A pod attached through the chain must reach the allowed
// registry, lose the network when the agent is killed (kill -9), and
// resume when it is started again. Then, for each of those capabilities, an agent without it
// must fail to start or to attach a pod: none is superfluous.
func TestDaemonSetCapabilities(t *testing.T) {
	requireNode(t)
	for _, tool := range []string{"setpriv", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s is not installed (util-linux)", tool)
		}
	}
	caps := daemonSetCaps(t)
	n := newNode(t)
	agent := buildAgent(t, n.dir)
	n.guardAsCLI()
	list := n.conflist("1.0.0")
	stop, pid, err := n.startConfinedPID(agent, caps)
	if err != nil {
		t.Fatalf("the agent with the DaemonSet's capabilities %v: %v", caps, err)
	}
	p := n.newPod("caps", "")
	n.add(list, p)
	if code := p.curl(n.w.URL(world.RoleNPM) + "/cni-caps"); code == "000" || code == "403" {
		t.Fatalf("a pod of the confined agent fetching the registry: HTTP %s", code)
	}
	// kill -9 after ADD: the pins hold and drop, nothing leaks; a new
	// agent resumes the pod from its registry.
	syscall.Kill(pid, syscall.SIGKILL)
	stop()
	mark := n.w.Mark()
	npm := n.w.Name(world.RoleNPM)
	if code := p.curl("https://"+npm+"/cni-killed", "--resolve", npm+":443:"+n.w.Addr(world.RoleNPM).String()); code != "000" {
		t.Errorf("with the agent killed: HTTP %s, want no answer", code)
	}
	if rs := n.w.Log().Since(mark); len(rs) > 0 {
		t.Errorf("with the agent killed, the world received: %v", rs)
	}
	if stop, err = n.startConfined(agent, caps); err != nil {
		t.Fatalf("restart the agent: %v", err)
	}
	if code := p.curl(n.w.URL(world.RoleNPM) + "/cni-resumed"); code == "000" || code == "403" {
		t.Fatalf("the pod after the agent was killed and restarted: HTTP %s", code)
	}
	if err := n.cni.DelNetworkList(context.Background(), list, p.rt); err != nil {
		t.Fatal(err)
	}
	stop()
	for i, c := range caps {
		fewer := append(append([]string{}, caps[:i]...), caps[i+1:]...)
		t.Run("without "+c, func(t *testing.T) {
			stop, err := n.startConfined(agent, fewer)
			if err != nil {
				t.Logf("does not start without %s: %v", c, err)
				return
			}
			defer stop()
			q := n.newPod("no-"+strings.ToLower(c), "")
			_, err = n.cni.AddNetworkList(context.Background(), list, q.rt)
			if err == nil {
				t.Errorf("the agent attached a pod without %s: the DaemonSet need not add it", c)
			} else {
				t.Logf("ADD fails without %s: %v", c, err)
			}
			n.cni.DelNetworkList(context.Background(), list, q.rt)
		})
	}
}

func daemonSetCaps(t *testing.T) []string {
	b, err := os.ReadFile("../../deploy/kubernetes/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "agent" && c.SecurityContext != nil && c.SecurityContext.Capabilities != nil {
			for _, a := range c.SecurityContext.Capabilities.Add {
				out = append(out, string(a))
			}
			if d := c.SecurityContext.Capabilities.Drop; len(d) != 1 || d[0] != corev1.Capability("ALL") {
				t.Fatalf("the agent container drops %v, not ALL", d)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("the DaemonSet's agent container adds no capabilities")
	}
	return out
}

func buildAgent(t *testing.T, dir string) string {
	bin := filepath.Join(dir, "airlock")
	cmd := exec.Command("go", "build", "-tags", "remote,exclude_graphdriver_btrfs,btrfs_noversion,exclude_graphdriver_devicemapper,containers_image_openpgp",
		"-o", bin, "airlock/cmd/airlock")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build airlock: %v\n%s", err, out)
	}
	return bin
}

// startConfined starts the agent in a mount namespace where /proc/sys is
// read-only and the host's is bound at DIR/hostsys, with only caps in its
// bounding set (root gets exactly those). It returns a stop function,
// or the agent's log when it exits or never answers.
func (n *node) startConfined(agent string, caps []string) (func(), error) {
	stop, _, err := n.startConfinedPID(agent, caps)
	return stop, err
}

func fnvSum(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// startConfinedPID is startConfined that also returns the agent's PID
// (unshare, sh and setpriv exec each other: one process).
func (n *node) startConfinedPID(agent string, caps []string) (func(), int, error) {
	set := "-all"
	for _, c := range caps {
		set += ",+" + strings.ToLower(c)
	}
	sys := filepath.Join(n.dir, "hostsys")
	os.MkdirAll(sys, 0o755)
	script := fmt.Sprintf(`mount --make-rprivate / && mount --bind /proc/sys %[1]s && mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys &&
exec setpriv --bounding-set=%[2]s --inh-caps=-all %[3]s serve --node --config %[4]s --instance %[5]s --pin-dir %[6]s --proc-sys %[1]s --log-level debug`,
		sys, set, agent, n.cfgPath, n.instance, n.pinDir)
	logf, err := os.CreateTemp(n.dir, "agent-*.log")
	if err != nil {
		return nil, 0, err
	}
	cmd := exec.Command("unshare", "--mount", "--", "sh", "-c", script)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		logf.Close()
	}
	n.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			stop()
		}
	})
	deadline := time.After(20 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			b, _ := os.ReadFile(logf.Name())
			return nil, 0, fmt.Errorf("exited (%v): %s", err, lastLines(string(b), 3))
		case <-deadline:
			stop()
			return nil, 0, fmt.Errorf("no answer on %s", n.socket)
		case <-time.After(50 * time.Millisecond):
			if st, err := client.New(n.socket).NodeStatus(context.Background()); err == nil && st.Ready {
				return stop, cmd.Process.Pid, nil
			}
		}
	}
}

func lastLines(s string, k int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	if len(ls) > k {
		ls = ls[len(ls)-k:]
	}
	return strings.Join(ls, " | ")
}
