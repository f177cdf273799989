package bpf

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// installGuards sets up, idempotently, what the steering needs and what
// keeps a detached program failing closed:
//
//	ip rule add pref <RulePriority> fwmark <Mark>/<MarkMask> lookup <Table>
//	ip route replace local 0.0.0.0/0 dev lo table <Table>
//	nft table inet <NFTTable>:
//	  input:   iifname "<prefix>*" mark & MarkMask != Mark -> drop
//	  forward: iifname "<prefix>*" -> drop; oifname "<prefix>*" -> drop
//
// The program sets the mark only on packets it assigned to a socket, and a
// mark never crosses from the sandbox's netns (veth scrubs it), so without
// the program nothing from a sandbox veth is delivered or forwarded.
func installGuards(g GuardConfig) error {
	if err := installNFT(g); err != nil {
		return fmt.Errorf("bpf: nftables guard %s: %w", g.NFTTable, err)
	}
	if err := installRouting(g); err != nil {
		return fmt.Errorf("bpf: policy routing (table %d): %w", g.Table, err)
	}
	return nil
}

func removeGuards(g GuardConfig) error {
	var errs []error
	if c, err := nftables.New(); err != nil {
		errs = append(errs, err)
	} else {
		t := &nftables.Table{Family: nftables.TableFamilyINet, Name: g.NFTTable}
		c.AddTable(t)
		c.DelTable(t)
		errs = append(errs, c.Flush())
	}
	if err := netlink.RuleDel(rule(g)); err != nil && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("delete rule: %w", err))
	}
	if r, err := localRoute(g); err == nil {
		if err := netlink.RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete route: %w", err))
		}
	}
	return errors.Join(errs...)
}

func installNFT(g GuardConfig) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: g.NFTTable}
	// add+delete+add replaces any previous version in one transaction.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	accept := nftables.ChainPolicyAccept
	in := c.AddChain(&nftables.Chain{
		Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept,
	})
	fwd := c.AddChain(&nftables.Chain{
		Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept,
	})
	drop := []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}
	unmarked := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(g.MarkMask), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(g.Mark)},
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: in,
		Exprs: concat(ifname(expr.MetaKeyIIFNAME, g.IfacePrefix), unmarked, drop)})
	c.AddRule(&nftables.Rule{Table: t, Chain: fwd,
		Exprs: concat(ifname(expr.MetaKeyIIFNAME, g.IfacePrefix), drop)})
	c.AddRule(&nftables.Rule{Table: t, Chain: fwd,
		Exprs: concat(ifname(expr.MetaKeyOIFNAME, g.IfacePrefix), drop)})
	return c.Flush()
}

// ifname matches interface names starting with prefix (nft's "prefix*").
func ifname(key expr.MetaKey, prefix string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(prefix)},
	}
}

func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func rule(g GuardConfig) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = unix.AF_INET
	r.Priority = g.RulePriority
	r.Mark = g.Mark
	mask := g.MarkMask
	r.Mask = &mask
	r.Table = g.Table
	return r
}

func localRoute(g GuardConfig) (*netlink.Route, error) {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return nil, err
	}
	return &netlink.Route{
		LinkIndex: lo.Attrs().Index,
		Dst:       &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
		Table:     g.Table,
		Type:      unix.RTN_LOCAL,
		Scope:     netlink.SCOPE_HOST,
	}, nil
}

func installRouting(g GuardConfig) error {
	r, err := localRoute(g)
	if err != nil {
		return err
	}
	if err := netlink.RouteReplace(r); err != nil {
		return fmt.Errorf("local route: %w", err)
	}
	if err := netlink.RuleAdd(rule(g)); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("rule: %w", err)
	}
	return nil
}

// guardIface turns forwarding and IPv6 off on a sandbox's host-side veth.
func guardIface(procSys, name string) error {
	if err := writeSysctl(filepath.Join(procSys, "net/ipv4/conf", name, "forwarding"), "0"); err != nil {
		return err
	}
	v6 := filepath.Join(procSys, "net/ipv6/conf", name, "disable_ipv6")
	if _, err := os.Stat(v6); err == nil {
		return writeSysctl(v6, "1")
	}
	return nil
}

func writeSysctl(path, v string) error {
	if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", path, v, err)
	}
	return nil
}
