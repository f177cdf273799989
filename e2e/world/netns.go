package world

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// namespace is the world's netns and the veth pair into it.
type namespace struct {
	name     string
	handle   netns.NsHandle
	hostLink string
}

// inNS runs fn on a fresh OS thread that has joined ns. The thread is never
// handed back to the scheduler: the goroutine exits still locked, so Go
// terminates the thread and no other goroutine ever runs in the world's
// namespace by accident. Sockets created by fn keep the world's namespace.
func inNS(ns netns.NsHandle, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			done <- fmt.Errorf("world: enter netns: %w", err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// runNetns is where named network namespaces are bind-mounted.
const runNetns = "/run/netns"

// sharedRunNetns makes runNetns a shared mount point, as `ip netns add`
// does (netns.NewNamed does not). A namespace's bind mount then reaches
// every mount namespace made while it exists (rootless Podman's pause
// process makes one) as a propagated mount, and its removal follows it
// there. Under a private runNetns such a namespace keeps a locked copy,
// and the name can never be removed again (unlink: EBUSY).
func sharedRunNetns() error {
	if err := os.MkdirAll(runNetns, 0o755); err != nil {
		return err
	}
	err := unix.Mount("", runNetns, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) { // not a mount point yet: make it one
		if err = unix.Mount(runNetns, runNetns, "none", unix.MS_BIND|unix.MS_REC, ""); err == nil {
			err = unix.Mount("", runNetns, "none", unix.MS_SHARED|unix.MS_REC, "")
		}
	}
	if err != nil {
		return fmt.Errorf("world: make %s a shared mount: %w", runNetns, err)
	}
	return nil
}

// newNamedNS creates a named network namespace without moving any thread
// that keeps running Go code into it.
func newNamedNS(name string) (netns.NsHandle, error) {
	if err := sharedRunNetns(); err != nil {
		return netns.None(), err
	}
	type result struct {
		h   netns.NsHandle
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		h, err := netns.NewNamed(name)
		done <- result{h, err}
	}()
	r := <-done
	if r.err != nil {
		return netns.None(), fmt.Errorf("world: create netns %s: %w", name, r.err)
	}
	return r.h, nil
}

func (n *namespace) remove() error {
	var errs []error
	if l, err := netlink.LinkByName(n.hostLink); err == nil {
		if err := netlink.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("world: delete %s: %w", n.hostLink, err))
		}
	}
	if n.handle.IsOpen() {
		n.handle.Close()
	}
	if err := netns.DeleteNamed(n.name); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("world: delete netns %s: %w", n.name, err))
	}
	return errors.Join(errs...)
}

// makeNetwork picks a free /24 in 198.19.0.0/16, creates the namespace and
// the veth pair, and addresses both ends.
func (w *World) makeNetwork(ctx context.Context) error {
	if err := w.pickPrefix(); err != nil {
		return err
	}
	h, err := newNamedNS(w.NetNS)
	if err != nil {
		return err
	}
	w.ns = &namespace{name: w.NetNS, handle: h, hostLink: w.HostLink}
	peer := "alw" + w.ID + "w"
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: w.HostLink},
		PeerName:      peer,
		PeerNamespace: netlink.NsFd(int(h)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("world: add veth %s: %w", w.HostLink, err)
	}
	if err := w.addressHost(); err != nil {
		return err
	}
	return w.addressWorld(peer)
}

func (w *World) pickPrefix() error {
	used, err := usedV4()
	if err != nil {
		return err
	}
	for range 32 {
		third := byte(16 + rand.IntN(224))
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, third, 0}), 24)
		if overlapsAny(p, used) {
			continue
		}
		w.Prefix = p
		w.HostAddr = netip.AddrFrom4([4]byte{198, 19, third, 1})
		for r, o := range hostOctet {
			w.addrs[r] = netip.AddrFrom4([4]byte{198, 19, third, o})
		}
		if ipv6Enabled() {
			w.Prefix6 = netip.MustParsePrefix(fmt.Sprintf("2001:2:0:%x::/64", third))
			w.HostAddr6 = netip.MustParseAddr(fmt.Sprintf("2001:2:0:%x::1", third))
			for r, o := range hostOctet {
				w.addrs6[r] = netip.MustParseAddr(fmt.Sprintf("2001:2:0:%x::%x", third, o))
			}
		}
		return nil
	}
	return errors.New("world: no free /24 in 198.19.0.0/16")
}

// usedV4 lists the host's IPv4 routes and addresses.
func usedV4() ([]netip.Prefix, error) {
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("world: list routes: %w", err)
	}
	var out []netip.Prefix
	for _, r := range routes {
		if r.Dst == nil || r.Dst.IP.IsUnspecified() {
			continue
		}
		if p, ok := ipNetPrefix(r.Dst); ok {
			out = append(out, p)
		}
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("world: list addresses: %w", err)
	}
	for _, a := range addrs {
		if p, ok := ipNetPrefix(a.IPNet); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

func ipNetPrefix(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
}

func overlapsAny(p netip.Prefix, used []netip.Prefix) bool {
	for _, u := range used {
		if u.Overlaps(p) {
			return true
		}
	}
	return false
}

func ipv6Enabled() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv6/conf/all/disable_ipv6")
	return err == nil && len(b) > 0 && b[0] == '0'
}

func (w *World) addressHost() error {
	l, err := netlink.LinkByName(w.HostLink)
	if err != nil {
		return fmt.Errorf("world: %s: %w", w.HostLink, err)
	}
	if err := addAddr(nil, l, netip.PrefixFrom(w.HostAddr, 24)); err != nil {
		return err
	}
	if w.HostAddr6.IsValid() {
		if err := addAddr(nil, l, netip.PrefixFrom(w.HostAddr6, 64)); err != nil {
			return err
		}
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("world: up %s: %w", w.HostLink, err)
	}
	return nil
}

func (w *World) addressWorld(peer string) error {
	h, err := netlink.NewHandleAt(w.ns.handle)
	if err != nil {
		return fmt.Errorf("world: netlink in netns: %w", err)
	}
	defer h.Close()
	l, err := h.LinkByName(peer)
	if err != nil {
		return fmt.Errorf("world: %s: %w", peer, err)
	}
	for _, r := range Roles {
		if err := addAddr(h, l, netip.PrefixFrom(w.addrs[r], 24)); err != nil {
			return err
		}
		if a := w.addrs6[r]; a.IsValid() {
			if err := addAddr(h, l, netip.PrefixFrom(a, 64)); err != nil {
				return err
			}
		}
	}
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("world: lo: %w", err)
	}
	for _, x := range []netlink.Link{lo, l} {
		if err := h.LinkSetUp(x); err != nil {
			return fmt.Errorf("world: up %s: %w", x.Attrs().Name, err)
		}
	}
	w.worldLink = peer
	w.worldIndex = l.Attrs().Index
	return w.routeWorld(h, l)
}

// routeWorld gives the world a default route back through the host, so a
// packet that leaks past the appliance could be answered — a leak shows up
// as a working connection as well as in the canary's records.
func (w *World) routeWorld(h *netlink.Handle, l netlink.Link) error {
	gw := net.IP(w.HostAddr.AsSlice())
	if err := h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw}); err != nil {
		return fmt.Errorf("world: default route: %w", err)
	}
	if w.HostAddr6.IsValid() {
		gw6 := net.IP(w.HostAddr6.AsSlice())
		if err := h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw6}); err != nil {
			return fmt.Errorf("world: default route (v6): %w", err)
		}
	}
	return nil
}

func addAddr(h *netlink.Handle, l netlink.Link, p netip.Prefix) error {
	a := &netlink.Addr{
		IPNet: &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())},
	}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	var err error
	if h == nil {
		err = netlink.AddrAdd(l, a)
	} else {
		err = h.AddrAdd(l, a)
	}
	if err != nil {
		return fmt.Errorf("world: address %s on %s: %w", p, l.Attrs().Name, err)
	}
	return nil
}
