package runner

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netlinkHost is hostNet on the real kernel (needs root).
type netlinkHost struct{}

var _ hostNet = netlinkHost{}

func (netlinkHost) AddVeth(host, peer, alias string, mac net.HardwareAddr) (int, error) {
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: host}, PeerName: peer, PeerHardwareAddr: mac}
	if err := netlink.LinkAdd(v); err != nil {
		return 0, fmt.Errorf("add veth %s: %w", host, err)
	}
	l, err := netlink.LinkByName(host)
	if err != nil {
		return 0, fmt.Errorf("veth %s: %w", host, err)
	}
	if err := netlink.LinkSetAlias(l, alias); err != nil {
		return 0, fmt.Errorf("veth %s: alias: %w", host, err)
	}
	for _, s := range []struct{ path, val string }{
		{"/proc/sys/net/ipv4/conf/" + host + "/forwarding", "0"},
		{"/proc/sys/net/ipv6/conf/" + host + "/disable_ipv6", "1"},
	} {
		if err := writeSysctl(s.path, s.val); err != nil {
			return 0, fmt.Errorf("veth %s: %w", host, err)
		}
	}
	return l.Attrs().Index, nil
}

func (netlinkHost) UpHost(host string, addr, gw netip.Addr) error {
	l, err := netlink.LinkByName(host)
	if err != nil {
		return fmt.Errorf("veth %s: %w", host, err)
	}
	a := &netlink.Addr{IPNet: hostNet32(gw), Scope: unix.RT_SCOPE_LINK}
	if err := netlink.AddrAdd(l, a); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("veth %s: add gateway %s: %w", host, gw, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("veth %s: up: %w", host, err)
	}
	rt := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: hostNet32(addr), Scope: netlink.SCOPE_LINK,
		Src: net.IP(gw.AsSlice())}
	if err := netlink.RouteReplace(rt); err != nil {
		return fmt.Errorf("veth %s: route to %s: %w", host, addr, err)
	}
	return nil
}

func (netlinkHost) MoveIn(peer string, pid int, addr, gw netip.Addr) error {
	ns, err := netns.GetFromPath("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return fmt.Errorf("sandbox netns of pid %d: %w", pid, err)
	}
	defer ns.Close()
	l, err := netlink.LinkByName(peer)
	if err != nil {
		return fmt.Errorf("veth peer %s: %w", peer, err)
	}
	if err := netlink.LinkSetNsFd(l, int(ns)); err != nil {
		return fmt.Errorf("move %s into the sandbox: %w", peer, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("sandbox netns: %w", err)
	}
	defer h.Close()
	if err := disableIPv6In(ns); err != nil {
		return err
	}
	return configureSandboxLink(h, peer, addr, gw)
}

func configureSandboxLink(h *netlink.Handle, peer string, addr, gw netip.Addr) error {
	l, err := h.LinkByName(peer)
	if err != nil {
		return fmt.Errorf("sandbox link: %w", err)
	}
	if err := h.LinkSetName(l, "eth0"); err != nil {
		return fmt.Errorf("sandbox link: rename: %w", err)
	}
	if err := h.AddrAdd(l, &netlink.Addr{IPNet: hostNet32(addr)}); err != nil {
		return fmt.Errorf("sandbox link: address %s: %w", addr, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("sandbox link: up: %w", err)
	}
	rt := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.IP(gw.AsSlice()), Flags: int(netlink.FLAG_ONLINK)}
	if err := h.RouteAdd(rt); err != nil {
		return fmt.Errorf("sandbox link: default route via %s: %w", gw, err)
	}
	return nil
}

// disableIPv6In turns IPv6 off in a network namespace: net sysctls apply to
// the namespace of the writing thread.
func disableIPv6In(ns netns.NsHandle) error {
	if _, err := os.Stat("/proc/sys/net/ipv6"); err != nil {
		return nil // no IPv6 in this kernel
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter sandbox netns: %w", err)
			runtime.UnlockOSThread()
			return
		}
		var werr error
		for _, k := range []string{"all", "default", "lo"} {
			werr = errors.Join(werr, writeSysctl("/proc/sys/net/ipv6/conf/"+k+"/disable_ipv6", "1"))
		}
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(werr, err) // the thread stays locked and dies with its goroutine
			return
		}
		runtime.UnlockOSThread()
		errc <- werr
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("disable IPv6 in the sandbox: %w", err)
	}
	return nil
}

func (netlinkHost) Index(name string) (int, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return 0, fmt.Errorf("link %s: %w", name, ErrNotFound)
		}
		return 0, err
	}
	return l.Attrs().Index, nil
}

func (netlinkHost) DelLink(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return err
	}
	if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

func (netlinkHost) Links(prefix string) (map[string]string, error) {
	ls, err := netlink.LinkList()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range ls {
		if a := l.Attrs(); strings.HasPrefix(a.Name, prefix) {
			out[a.Name] = a.Alias
		}
	}
	return out, nil
}

func hostNet32(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(32, 32)}
}

func writeSysctl(path, val string) error {
	if err := os.WriteFile(path, []byte(val), 0); err != nil {
		return fmt.Errorf("sysctl %s: %w", strings.TrimPrefix(path, "/proc/sys/"), err)
	}
	return nil
}
