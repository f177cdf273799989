package serve

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"airlock/audit"
	"airlock/bpf"
	"airlock/client"
)

// nodeState is what a node agent (`airlock serve --node`) keeps about the
// pods the CNI plugin attached: the registry file and the kernel handles.
// Pods are sandboxes of kind "pod": their host veth carries the same
// pinned path and guards as a Podman sandbox's, and their address is
// their identity in the Registry that dnsd and the proxy ask.
type nodeState struct {
	store *podStore
	mu    sync.Mutex // serializes attach, detach and GC
	live  []int      // ifindexes restored at start, for the path's Reconcile
}

func errNotNode() error {
	return client.Errorf(client.CodeUnsupported, "this appliance is not a node agent: start it with `airlock serve --node`")
}

func (a *Appliance) nodeMode() (*nodeState, error) {
	if a.node == nil {
		return nil, errNotNode()
	}
	return a.node, nil
}

func (a *Appliance) podAlias(id string) string {
	return podAliasPrefix + a.opts.Instance + ":" + id
}

// AttachPod steers a pod's host veth through the kernel path and
// registers its address under its policy (CNI ADD). Any failure leaves
// nothing attached or registered.
func (a *Appliance) AttachPod(_ context.Context, req client.PodAttachRequest) (client.Pod, error) {
	n, err := a.nodeMode()
	if err != nil {
		return client.Pod{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	rec, sn, ref, err := a.podRequest(n, req)
	if err != nil {
		return client.Pod{}, err
	}
	if e, ok := a.registry.lookup(sn.Addr); ok && e.id != rec.ID {
		return client.Pod{}, client.Errorf(client.CodeConflict, "address %s is already sandbox %s's", sn.Addr, e.id)
	}
	ifindex, err := takeOverVeth(req.HostIf, rec.HostIf, a.podAlias(rec.ID))
	if err != nil {
		return client.Pod{}, client.Errorf(client.CodeInvalid, "pod %s: %v", rec.ID, err)
	}
	h, err := a.path.Attach(ifindex, sn)
	if err != nil {
		return client.Pod{}, client.Errorf(client.CodeUnavailable, "pod %s: attach the kernel path: %v", rec.ID, err)
	}
	rec.Ifindex = ifindex
	a.registry.Add(rec.ID, sn.Addr, ref)
	a.setHandle(rec.ID, h)
	if err := n.store.put(rec); err != nil {
		a.forgetPod(rec.ID, h)
		return client.Pod{}, fmt.Errorf("pod %s: %w", rec.ID, err)
	}
	a.podEvent(rec, "created", fmt.Sprintf("kind=pod pod=%s/%s container=%s ifname=%s host_if=%s",
		req.Namespace, req.Name, req.ContainerID, req.IfName, rec.HostIf))
	return a.podView(rec), nil
}

// podRequest validates an attach request into the record to keep, the
// kernel path's view of the pod and its policy.
func (a *Appliance) podRequest(n *nodeState, req client.PodAttachRequest) (podRecord, bpf.SandboxNet, *policyRef, error) {
	bad := func(format string, args ...any) (podRecord, bpf.SandboxNet, *policyRef, error) {
		return podRecord{}, bpf.SandboxNet{}, nil, client.Errorf(client.CodeInvalid, format, args...)
	}
	if req.ContainerID == "" || req.IfName == "" || req.HostIf == "" {
		return bad("container_id, ifname and host_if are required")
	}
	addr, err := netip.ParseAddr(req.Address)
	if err != nil || !addr.Is4() {
		return bad("address %q: want the pod's IPv4 address", req.Address)
	}
	if !addr.IsGlobalUnicast() {
		return bad("address %s is not a unicast address a pod can have", addr)
	}
	gw := a.cfg.Network.Gateway
	if req.Gateway != "" {
		if gw, err = netip.ParseAddr(req.Gateway); err != nil || !gw.Is4() {
			return bad("gateway %q: want an IPv4 address", req.Gateway)
		}
	}
	var mac net.HardwareAddr
	if req.MAC != "" {
		if mac, err = net.ParseMAC(req.MAC); err != nil || len(mac) != 6 {
			return bad("mac %q: want a 6-byte MAC address", req.MAC)
		}
	}
	name := req.Policy
	if name == "" {
		name = a.cfg.DefaultPolicy
	}
	if name == "" {
		return bad("the pod names no policy and the node has no default_policy")
	}
	ref, ok := a.policies.Get(name)
	if !ok {
		return bad("policy %q is not loaded on this node (files live in %s)", name, a.cfg.PolicyDir)
	}
	id := client.PodID(req.ContainerID, req.IfName)
	num, ok := n.num(id)
	if !ok {
		return podRecord{}, bpf.SandboxNet{}, nil, client.Errorf(client.CodeQuotaExceeded,
			"this node attaches at most %d pods", bpf.MaxSandboxes-1)
	}
	rec := podRecord{Pod: client.Pod{ID: id, ContainerID: req.ContainerID, IfName: req.IfName, HostIf: podIfName(id),
		Address: addr.String(), Policy: name, Namespace: req.Namespace, Name: req.Name,
		Created: time.Now().UTC().Format(time.RFC3339Nano)}, MAC: req.MAC, Gateway: gw.String(), Num: num}
	return rec, podNet(rec, addr, gw, mac, a.cfg.Listen.ProxyExplicit), ref, nil
}

// num is the kernel counters' key for pod id: the one it has, or the
// smallest one no pod uses (node mode runs no Podman sandboxes, whose
// keys are pool offsets). Call with n.mu held.
func (n *nodeState) num(id string) (uint32, bool) {
	used := map[uint32]bool{}
	for _, r := range n.store.list() {
		if r.ID == id {
			return r.Num, true
		}
		used[r.Num] = true
	}
	for i := uint32(1); i < bpf.MaxSandboxes; i++ {
		if !used[i] {
			return i, true
		}
	}
	return 0, false
}

func podNet(rec podRecord, addr, gw netip.Addr, mac net.HardwareAddr, proxyPort uint16) bpf.SandboxNet {
	return bpf.SandboxNet{Sandbox: bpf.SandboxID{Num: rec.Num, Name: rec.ID}, Addr: addr, MAC: mac,
		Gateway: gw, ProxyPort: proxyPort}
}

// podView is the API's view of a record, with the current policy hash.
func (a *Appliance) podView(rec podRecord) client.Pod {
	p := rec.Pod
	if ref, ok := a.policies.Get(p.Policy); ok {
		p.PolicyHash = ref.load().Hash()
	}
	return p
}

// podStates: a pod runs from its attachment until it is detached (ended)
// or a restarted node agent finds it gone (its record removed: ended).
var podStates = map[string]audit.SandboxState{"created": audit.StateRunning, "adopted": audit.StateRunning}

func (a *Appliance) podEvent(rec podRecord, stage, detail string) {
	e := audit.New(audit.KindLifecycle, rec.ID)
	st, ok := podStates[stage]
	if !ok {
		st = audit.StateEnded
	}
	e.Lifecycle = &audit.Lifecycle{Stage: stage, State: st, Policy: rec.Policy, Address: rec.Address, Detail: detail}
	a.tap.Emit(e)
	a.log.Info("pod "+stage, "sandbox", rec.ID, "policy", rec.Policy, "address", rec.Address, "detail", detail)
}

// setHandle records a pod's attachment beside the Podman sandboxes', so
// the kill switch (airlock lockdown --sandbox) finds it.
func (a *Appliance) setHandle(id string, h bpf.Handle) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.handles[id] = h
}

// forgetPod detaches a pod's path and drops its registration.
func (a *Appliance) forgetPod(id string, h bpf.Handle) error {
	a.mu.Lock()
	delete(a.handles, id)
	a.mu.Unlock()
	a.registry.Remove(id)
	a.secrets.Forget(id)
	a.approvals.Forget(id)
	return a.path.Detach(h)
}

func handleOf(rec podRecord) bpf.Handle {
	return bpf.Handle{Ifindex: rec.Ifindex, Sandbox: bpf.SandboxID{Num: rec.Num, Name: rec.ID}}
}

// CheckPod verifies a pod's attachment (CNI CHECK): the host veth is there
// under its guarded name, the pinned link is live on it and configured for
// the pod, and the registry maps its address to it.
func (a *Appliance) CheckPod(_ context.Context, id string) (client.Pod, error) {
	n, err := a.nodeMode()
	if err != nil {
		return client.Pod{}, err
	}
	rec, ok := n.store.get(id)
	if !ok {
		return client.Pod{}, client.Errorf(client.CodeNotFound, "no pod %q is attached on this node", id)
	}
	if !podLinkAlive(rec.HostIf, rec.Ifindex, a.podAlias(id)) {
		return client.Pod{}, client.Errorf(client.CodeConflict, "pod %s: host interface %s (index %d) is gone", id, rec.HostIf, rec.Ifindex)
	}
	if err := a.path.Verify(rec.Ifindex, rec.Num); err != nil {
		return client.Pod{}, client.Errorf(client.CodeConflict, "pod %s: %v", id, err)
	}
	if e, ok := a.registry.lookup(netip.MustParseAddr(rec.Address)); !ok || e.id != id {
		return client.Pod{}, client.Errorf(client.CodeConflict, "pod %s: address %s is not registered to it", id, rec.Address)
	}
	return a.podView(rec), nil
}

// DetachPod detaches and forgets a pod (CNI DEL). An unknown id is no
// error: DEL may come more than once, or after a failed ADD.
func (a *Appliance) DetachPod(_ context.Context, id string) error {
	n, err := a.nodeMode()
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return a.detachPodLocked(n, id, "destroyed", "cni DEL")
}

func (a *Appliance) detachPodLocked(n *nodeState, id, stage, detail string) error {
	rec, ok := n.store.get(id)
	if !ok {
		return nil
	}
	if err := a.forgetPod(id, handleOf(rec)); err != nil {
		return fmt.Errorf("pod %s: %w", id, err)
	}
	if err := n.store.remove(id); err != nil {
		return fmt.Errorf("pod %s: %w", id, err)
	}
	a.podEvent(rec, stage, detail)
	return nil
}

// Pods lists the attached pods, oldest first.
func (a *Appliance) Pods(context.Context) ([]client.Pod, error) {
	n, err := a.nodeMode()
	if err != nil {
		return nil, err
	}
	recs := n.store.list()
	out := make([]client.Pod, 0, len(recs))
	for _, r := range recs {
		out = append(out, a.podView(r))
	}
	return out, nil
}

// GCPods detaches every pod that is not in req.Valid (CNI GC).
func (a *Appliance) GCPods(_ context.Context, req client.PodGCRequest) (client.PodGCResult, error) {
	n, err := a.nodeMode()
	if err != nil {
		return client.PodGCResult{}, err
	}
	valid := map[string]bool{}
	for _, k := range req.Valid {
		valid[client.PodID(k.ContainerID, k.IfName)] = true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	res := client.PodGCResult{Removed: []string{}}
	var errs []error
	for _, rec := range n.store.list() {
		if valid[rec.ID] {
			continue
		}
		if err := a.detachPodLocked(n, rec.ID, "destroyed", "cni GC: the runtime no longer has the attachment"); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Removed = append(res.Removed, rec.ID)
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("gc: %v", errs)
	}
	return res, nil
}

// NodeStatus reports whether the agent can take pods (CNI STATUS).
func (a *Appliance) NodeStatus(ctx context.Context) client.NodeStatus {
	if a.node == nil {
		return client.NodeStatus{Reason: "not a node agent (airlock serve --node)"}
	}
	st := client.NodeStatus{Node: true, Ready: true, Pods: len(a.node.store.list()), DefaultPolicy: a.cfg.DefaultPolicy}
	if h := a.Health(ctx); h.Status != "ok" {
		st.Ready, st.Reason = false, "appliance "+h.Status+": "+fmt.Sprint(h.Components)
	}
	return st
}
