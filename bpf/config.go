package bpf

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"
)

// DefaultPinDir is where the path is pinned unless Open is told otherwise.
const DefaultPinDir = "/sys/fs/bpf/airlock"

// pinVersion names the subdirectory of the pin dir. Bump it whenever a map's
// type, key, value or size changes: the kernel refuses to reuse a pinned map
// whose spec differs, and a new directory lets the new layout start clean.
const pinVersion = "v2"

// Defaults for the host guards. The mark is a single bit (bit 28) that no
// common neighbour uses (netavark 0x2000, kube-proxy 0x4000/0x8000, Cilium
// 0x0f00, Tailscale 0xff0000, wg-quick 0xca6c); the routing table and rule
// priority 1711 collide with no table those tools use (52, 100-254, 2004,
// 2005, 51820) and sort before Tailscale's rules (5210-5270).
const (
	DefaultMark         uint32 = 0x10000000
	DefaultTable               = 1711
	DefaultRulePriority        = 1711
	DefaultIfacePrefix         = "alk-"
	DefaultNFTTable            = "airlock"
)

// SandboxID names a sandbox: Num keys the kernel's counters (non-zero, unique
// among live sandboxes, chosen by the caller), Name is what events carry.
type SandboxID struct {
	Num  uint32
	Name string
}

// SandboxNet is the network identity of one sandbox, as the program enforces
// it on the sandbox's host-side veth.
type SandboxNet struct {
	Sandbox SandboxID
	// Addr is the sandbox's only address (IPv4); any other source is spoofing.
	Addr netip.Addr
	// MAC, when set, is the only source MAC the sandbox may use.
	MAC net.HardwareAddr
	// Gateway is the host end's address: the only ARP target allowed.
	Gateway netip.Addr
	// DNSPort is the destination port steered to dnsd (any address); 0 means 53.
	DNSPort uint16
	// ProxyPort, when non-zero, steers TCP to Gateway:ProxyPort to the
	// explicit proxy listener (SetExplicitProxyListener) instead of the
	// transparent one.
	ProxyPort uint16
}

const maxNameLen = 47

// MaxSandboxes bounds SandboxID.Num (1 to MaxSandboxes-1): the counters are
// an array indexed by it.
const MaxSandboxes = 4096

func (n SandboxNet) validate() error {
	switch {
	case n.Sandbox.Num == 0 || n.Sandbox.Num >= MaxSandboxes:
		return fmt.Errorf("bpf: sandbox %q: numeric id %d outside 1..%d", n.Sandbox.Name, n.Sandbox.Num, MaxSandboxes-1)
	case len(n.Sandbox.Name) > maxNameLen:
		return fmt.Errorf("bpf: sandbox name %q longer than %d bytes", n.Sandbox.Name, maxNameLen)
	case !n.Addr.Is4():
		return fmt.Errorf("bpf: sandbox %q: address %v is not IPv4", n.Sandbox.Name, n.Addr)
	case !n.Gateway.Is4():
		return fmt.Errorf("bpf: sandbox %q: gateway %v is not IPv4", n.Sandbox.Name, n.Gateway)
	case n.MAC != nil && len(n.MAC) != 6:
		return fmt.Errorf("bpf: sandbox %q: MAC %v is not 6 bytes", n.Sandbox.Name, n.MAC)
	}
	return nil
}

// GuardConfig selects the host guards' names and numbers. Zero fields take
// the Default* values.
type GuardConfig struct {
	// IfacePrefix matches every host-side sandbox veth (the runner names
	// them with it). Attach refuses interfaces without it.
	IfacePrefix string
	// Mark is what the program sets on steered packets; MarkMask (default
	// Mark) is the bits the rule and the nft guard compare.
	Mark, MarkMask uint32
	// Table is the routing table holding "local 0.0.0.0/0 dev lo".
	Table int
	// RulePriority is the priority of "fwmark Mark/MarkMask lookup Table".
	RulePriority int
	// NFTTable is the name of the inet nftables table.
	NFTTable string
}

func (g GuardConfig) withDefaults() GuardConfig {
	if g.IfacePrefix == "" {
		g.IfacePrefix = DefaultIfacePrefix
	}
	if g.Mark == 0 {
		g.Mark = DefaultMark
	}
	if g.MarkMask == 0 {
		g.MarkMask = g.Mark
	}
	if g.Table == 0 {
		g.Table = DefaultTable
	}
	if g.RulePriority == 0 {
		g.RulePriority = DefaultRulePriority
	}
	if g.NFTTable == "" {
		g.NFTTable = DefaultNFTTable
	}
	return g
}

func (g GuardConfig) validate() error {
	if g.Mark&g.MarkMask != g.Mark {
		return fmt.Errorf("bpf: mark %#x has bits outside mask %#x", g.Mark, g.MarkMask)
	}
	if len(g.IfacePrefix) >= 15 {
		return fmt.Errorf("bpf: interface prefix %q too long", g.IfacePrefix)
	}
	return nil
}

// Options configure Open. The zero value is the production setup.
type Options struct {
	Logger *slog.Logger
	Guard  GuardConfig
	// EventBudget is how many drop events each sandbox may put in the ring
	// buffer per EventWindow on each CPU (default 64 per 100 ms); beyond it
	// drops are only counted, and the counts are reported as
	// ReasonRateLimited.
	EventBudget uint32
	EventWindow time.Duration
	// FlushInterval is how long Events aggregates identical drops before
	// sending one Drop with their count (default 1 s).
	FlushInterval time.Duration
	// ProcSys is where the host's /proc/sys is writable (default
	// /proc/sys): a node agent in a container, whose own /proc/sys is
	// read-only, mounts the host's elsewhere.
	ProcSys string
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Guard = o.Guard.withDefaults()
	if o.EventBudget == 0 {
		o.EventBudget = 64
	}
	if o.EventWindow == 0 {
		o.EventWindow = 100 * time.Millisecond
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = time.Second
	}
	if o.ProcSys == "" {
		o.ProcSys = "/proc/sys"
	}
	return o
}
