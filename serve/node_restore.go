package serve

import (
	"context"
	"net"
	"net/netip"
)

// startNode opens the pod registry of a node agent and re-attaches every
// pod whose host veth is still there; the others are forgotten (their
// pinned links go in the kernel path's reconcile). A pod whose policy is
// no longer loaded is detached: its veth keeps the host guards and loses
// the network (fail closed).
func (a *Appliance) startNode(context.Context) error {
	if !a.opts.Node {
		return nil
	}
	n := &nodeState{store: newPodStore(podsFile(a.cfg.StateDir, a.opts.Instance))}
	if err := n.store.load(); err != nil {
		return err
	}
	a.node = n
	for _, rec := range n.store.list() {
		if ifindex, ok := a.restorePod(n, rec); ok {
			n.live = append(n.live, ifindex)
		}
	}
	return nil
}

func (a *Appliance) restorePod(n *nodeState, rec podRecord) (int, bool) {
	drop := func(detail string) (int, bool) {
		_ = a.forgetPod(rec.ID, handleOf(rec))
		if err := n.store.remove(rec.ID); err != nil {
			a.log.Warn("pod registry", "err", err)
		}
		a.podEvent(rec, "reconciled", detail)
		return 0, false
	}
	if !podLinkAlive(rec.HostIf, rec.Ifindex, a.podAlias(rec.ID)) {
		return drop("host interface " + rec.HostIf + " is gone")
	}
	ref, ok := a.policies.Get(rec.Policy)
	if !ok {
		return drop("policy " + rec.Policy + " is no longer loaded: the pod keeps no network")
	}
	addr, aerr := netip.ParseAddr(rec.Address)
	gw, gerr := netip.ParseAddr(rec.Gateway)
	mac, merr := parseOptionalMAC(rec.MAC)
	if aerr != nil || gerr != nil || merr != nil {
		return drop("unreadable registry record")
	}
	h, err := a.path.Attach(rec.Ifindex, podNet(rec, addr, gw, mac, a.cfg.Listen.ProxyExplicit))
	if err != nil {
		return drop("re-attach failed: " + err.Error())
	}
	a.registry.Add(rec.ID, addr, ref)
	a.setHandle(rec.ID, h)
	a.podEvent(rec, "adopted", "re-attached by a restarted node agent")
	return rec.Ifindex, true
}

func parseOptionalMAC(s string) (net.HardwareAddr, error) {
	if s == "" {
		return nil, nil
	}
	return net.ParseMAC(s)
}

// podIDs is the pods restored at start (for the kill switch's restore).
func (a *Appliance) podIDs() []string {
	if a.node == nil {
		return nil
	}
	var ids []string
	for _, r := range a.node.store.list() {
		ids = append(ids, r.ID)
	}
	return ids
}

// nodeLive is the interfaces of the pods restored at start.
func (a *Appliance) nodeLive() []int {
	if a.node == nil {
		return nil
	}
	return a.node.live
}
