package serve

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"airlock/client"
)

// podAliasPrefix tags the host end of a pod's veth; the runner's orphan
// sweep (alias "airlock:INSTANCE:ID") never matches it.
const podAliasPrefix = "airlock-pod:"

// podIfName is the guarded name the host end of pod id's veth gets, so the
// host guards (nft input/forward on the alk- prefix) hold for it exactly
// as for a Podman sandbox: "alk-" and the id's 10 hex digits (15 bytes).
func podIfName(id string) string {
	return client.PodIfName(id)
}

// takeOverVeth renames the main plugin's host end of a pod's veth into
// the guarded prefix and tags it, keeping its routes (a link that goes
// down loses them). It returns the interface index. Taking over a link
// that already carries the name is a no-op.
func takeOverVeth(hostIf, name, alias string) (int, error) {
	l, err := netlink.LinkByName(hostIf)
	if err != nil && hostIf != name {
		if l2, err2 := netlink.LinkByName(name); err2 == nil {
			l, err = l2, nil // a repeated ADD after the rename
		}
	}
	if err != nil {
		return 0, fmt.Errorf("host interface %q: %w", hostIf, err)
	}
	if l.Type() != "veth" {
		return 0, fmt.Errorf("host interface %q is a %s, not a veth", hostIf, l.Type())
	}
	if l.Attrs().Name != name {
		if err := renameKeepingRoutes(l, name); err != nil {
			return 0, fmt.Errorf("host interface %q: %w", hostIf, err)
		}
	}
	if err := netlink.LinkSetAlias(l, alias); err != nil {
		return 0, fmt.Errorf("host interface %s: alias: %w", name, err)
	}
	return l.Attrs().Index, nil
}

func renameKeepingRoutes(l netlink.Link, name string) error {
	routes, err := netlink.RouteList(l, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	if err := netlink.LinkSetDown(l); err != nil {
		return fmt.Errorf("set down: %w", err)
	}
	if err := netlink.LinkSetName(l, name); err != nil {
		return fmt.Errorf("rename to %s: %w", name, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("set up: %w", err)
	}
	for _, r := range routes {
		if r.Protocol == unix.RTPROT_KERNEL {
			continue // comes back with the address
		}
		r.LinkIndex = l.Attrs().Index
		if err := netlink.RouteReplace(&r); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("restore route %v: %w", r.Dst, err)
		}
	}
	return nil
}

// podLinkAlive reports whether the host end of a pod's veth still exists
// under name with index ifindex and the pod's alias.
func podLinkAlive(name string, ifindex int, alias string) bool {
	l, err := netlink.LinkByName(name)
	return err == nil && l.Attrs().Index == ifindex && l.Attrs().Alias == alias
}
