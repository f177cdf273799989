package bpf

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Handle identifies one attachment.
type Handle struct {
	Ifindex int
	Sandbox SandboxID
	LinkID  link.ID
}

const linkPrefix = "tcx-"

func (p *Path) linkPin(ifindex int) string {
	return filepath.Join(p.dir, "links", linkPrefix+strconv.Itoa(ifindex))
}

// Attach enforces n on the host-side interface ifindex: it writes the
// interface's configuration, turns forwarding and IPv6 off on it, and
// attaches the program at the head of its TCX ingress chain with a pinned
// link. Call it before the peer end moves into the sandbox, so no packet ever
// passes unfiltered. Attaching an interface again updates its configuration.
func (p *Path) Attach(ifindex int, n SandboxNet) (Handle, error) {
	if err := n.validate(); err != nil {
		return Handle{}, err
	}
	iface, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return Handle{}, fmt.Errorf("bpf: attach %s: interface %d: %w", n.Sandbox.Name, ifindex, err)
	}
	if !strings.HasPrefix(iface.Name, p.opts.Guard.IfacePrefix) {
		return Handle{}, fmt.Errorf("bpf: attach %s: interface %q lacks the guarded prefix %q",
			n.Sandbox.Name, iface.Name, p.opts.Guard.IfacePrefix)
	}
	if err := guardIface(p.opts.ProcSys, iface.Name); err != nil {
		return Handle{}, fmt.Errorf("bpf: attach %s: %w", n.Sandbox.Name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.writeConfig(configOf(ifindex, n)); err != nil {
		return Handle{}, fmt.Errorf("bpf: attach %s: write config: %w", n.Sandbox.Name, err)
	}
	id, err := p.attachLink(ifindex)
	if err != nil {
		_ = p.deleteConfig(uint32(ifindex))
		return Handle{}, fmt.Errorf("bpf: attach %s to %s: %w", n.Sandbox.Name, iface.Name, err)
	}
	p.names[n.Sandbox.Num] = n.Sandbox.Name
	p.log.Info("bpf: attached", "sandbox", n.Sandbox.Name, "iface", iface.Name, "link", id)
	return Handle{Ifindex: ifindex, Sandbox: n.Sandbox, LinkID: id}, nil
}

func configOf(ifindex int, n SandboxNet) steerSbxConfig {
	c := steerSbxConfig{
		Ifindex:   uint32(ifindex),
		Sandbox:   n.Sandbox.Num,
		Addr:      be32(n.Addr.As4()),
		Gateway:   be32(n.Gateway.As4()),
		DnsPort:   n.DNSPort,
		ProxyPort: n.ProxyPort,
	}
	if c.DnsPort == 0 {
		c.DnsPort = 53
	}
	if n.MAC != nil {
		copy(c.Mac[:], n.MAC)
		c.CheckMac = 1
	}
	for i := 0; i < len(n.Sandbox.Name) && i < maxNameLen; i++ {
		c.Name[i] = int8(n.Sandbox.Name[i])
	}
	return c
}

// fastSlots is FAST_SLOTS in c/steer.c.
const fastSlots = 4096

// writeConfig stores c in the configuration map and, when its fast slot is
// free (or holds a stale entry), in the fast array too.
func (p *Path) writeConfig(c steerSbxConfig) error {
	if err := p.objs.AlkConfig.Update(c.Ifindex, c, ebpf.UpdateAny); err != nil {
		return err
	}
	slot := c.Ifindex % fastSlots
	var cur steerSbxConfig
	if err := p.objs.AlkFastcfg.Lookup(slot, &cur); err != nil {
		return err
	}
	if cur.Ifindex != 0 && cur.Ifindex != c.Ifindex {
		var other steerSbxConfig
		if p.objs.AlkConfig.Lookup(cur.Ifindex, &other) == nil {
			return nil // the slot is another live interface's; the hash map serves this one
		}
	}
	return p.objs.AlkFastcfg.Update(slot, c, ebpf.UpdateAny)
}

// deleteConfig removes ifindex's configuration from both maps.
func (p *Path) deleteConfig(ifindex uint32) error {
	slot := ifindex % fastSlots
	var cur steerSbxConfig
	if p.objs.AlkFastcfg.Lookup(slot, &cur) == nil && cur.Ifindex == ifindex {
		if err := p.objs.AlkFastcfg.Update(slot, steerSbxConfig{}, ebpf.UpdateAny); err != nil {
			return err
		}
	}
	if err := p.objs.AlkConfig.Delete(ifindex); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// be32 returns the uint32 whose in-memory (little-endian) bytes are a, so
// the kernel sees the address in network order.
func be32(a [4]byte) uint32 {
	return uint32(a[0]) | uint32(a[1])<<8 | uint32(a[2])<<16 | uint32(a[3])<<24
}

func nameOf(c steerSbxConfig) string {
	b := make([]byte, 0, len(c.Name))
	for _, ch := range c.Name {
		if ch == 0 {
			break
		}
		b = append(b, byte(ch))
	}
	return string(b)
}

// resetStats zeroes the counters of a sandbox id that is no longer used.
func (p *Path) resetStats(num uint32) error {
	if num >= MaxSandboxes {
		return nil
	}
	zero := make([]steerSbxStats, ebpf.MustPossibleCPU())
	return p.objs.AlkStats.Update(num, zero, ebpf.UpdateExist)
}

// attachLink re-points an existing pinned link or creates and pins a new one.
func (p *Path) attachLink(ifindex int) (link.ID, error) {
	pin := p.linkPin(ifindex)
	if l, err := link.LoadPinnedLink(pin, nil); err == nil {
		defer l.Close()
		if tcxIfindex(l) == ifindex {
			if err := l.Update(p.objs.AlkSteer); err != nil {
				return 0, fmt.Errorf("update pinned link: %w", err)
			}
			return linkID(l), nil
		}
		// A defunct link (its interface is gone) or one for a reused index.
		_ = l.Unpin()
	} else if !errors.Is(err, os.ErrNotExist) {
		_ = os.Remove(pin)
	}
	l, err := link.AttachTCX(link.TCXOptions{
		Interface: ifindex,
		Program:   p.objs.AlkSteer,
		Attach:    ebpf.AttachTCXIngress,
		Anchor:    link.Head(),
	})
	if err != nil {
		return 0, fmt.Errorf("attach tcx ingress: %w", err)
	}
	defer l.Close()
	if err := l.Pin(pin); err != nil {
		return 0, fmt.Errorf("pin link: %w", err)
	}
	return linkID(l), nil
}

func tcxIfindex(l link.Link) int {
	info, err := l.Info()
	if err != nil || info.TCX() == nil {
		return 0
	}
	return int(info.TCX().Ifindex)
}

func linkID(l link.Link) link.ID {
	info, err := l.Info()
	if err != nil {
		return 0
	}
	return info.ID
}

// Detach removes the attachment and the interface's configuration. The
// sandbox's counters stay readable through Stats until Reconcile.
// Detach also clears the sandbox's blocks (BlockSandbox): its id may be
// given to another sandbox.
func (p *Path) Detach(h Handle) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.detach(h.Ifindex)
	if cerr := p.clearBlock(h.Sandbox.Num); cerr != nil {
		err = errors.Join(err, fmt.Errorf("bpf: clear block of sandbox %d: %w", h.Sandbox.Num, cerr))
	}
	return err
}

func (p *Path) detach(ifindex int) error {
	var errs []error
	pin := p.linkPin(ifindex)
	if l, err := link.LoadPinnedLink(pin, nil); err == nil {
		errs = append(errs, l.Unpin(), l.Close())
	} else if !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, os.Remove(pin))
	}
	errs = append(errs, p.deleteConfig(uint32(ifindex)))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bpf: detach interface %d: %w", ifindex, err)
	}
	return nil
}

// Handles lists the pinned attachments (for adoption after a restart).
func (p *Path) Handles() ([]Handle, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.handles()
}

func (p *Path) handles() ([]Handle, error) {
	entries, err := os.ReadDir(filepath.Join(p.dir, "links"))
	if err != nil {
		return nil, fmt.Errorf("bpf: list links: %w", err)
	}
	var hs []Handle
	for _, e := range entries {
		ifindex, err := strconv.Atoi(strings.TrimPrefix(e.Name(), linkPrefix))
		if err != nil {
			continue
		}
		h := Handle{Ifindex: ifindex}
		var c steerSbxConfig
		if p.objs.AlkConfig.Lookup(uint32(ifindex), &c) == nil {
			h.Sandbox = SandboxID{Num: c.Sandbox, Name: nameOf(c)}
		}
		if l, err := link.LoadPinnedLink(filepath.Join(p.dir, "links", e.Name()), nil); err == nil {
			h.LinkID = linkID(l)
			l.Close()
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// adopt points every pinned link at the program this process loaded and
// learns the sandbox names from the pinned configuration.
func (p *Path) adopt() error {
	var (
		key uint32
		c   steerSbxConfig
	)
	it := p.objs.AlkConfig.Iterate()
	for it.Next(&key, &c) {
		p.names[c.Sandbox] = nameOf(c)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("bpf: read pinned config: %w", err)
	}
	hs, err := p.handles()
	if err != nil {
		return err
	}
	for _, h := range hs {
		l, err := link.LoadPinnedLink(p.linkPin(h.Ifindex), nil)
		if err != nil {
			p.log.Warn("bpf: pinned link unreadable", "ifindex", h.Ifindex, "err", err)
			continue
		}
		if tcxIfindex(l) != 0 {
			if err := l.Update(p.objs.AlkSteer); err != nil {
				p.log.Warn("bpf: pinned link not updated", "ifindex", h.Ifindex, "err", err)
			}
		}
		l.Close()
	}
	return nil
}

// Reconcile removes every attachment whose interface is not in live or no
// longer exists (a defunct TCX link left by a deleted veth), configuration
// with no attachment, and the counters of sandboxes no longer configured.
// It returns the interface indexes it removed.
func (p *Path) Reconcile(live []int) ([]int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	hs, err := p.handles()
	if err != nil {
		return nil, err
	}
	var removed []int
	var errs []error
	attached := map[uint32]bool{}
	for _, h := range hs {
		l, err := link.LoadPinnedLink(p.linkPin(h.Ifindex), nil)
		stale := err != nil || !slices.Contains(live, h.Ifindex) || tcxIfindex(l) != h.Ifindex
		if l != nil {
			l.Close()
		}
		if !stale {
			attached[uint32(h.Ifindex)] = true
			continue
		}
		errs = append(errs, p.detach(h.Ifindex))
		removed = append(removed, h.Ifindex)
	}
	errs = append(errs, p.pruneMaps(attached))
	return removed, errors.Join(errs...)
}

func (p *Path) pruneMaps(attached map[uint32]bool) error {
	var (
		key   uint32
		c     steerSbxConfig
		stale []uint32
	)
	live := map[uint32]bool{}
	it := p.objs.AlkConfig.Iterate()
	for it.Next(&key, &c) {
		if attached[key] {
			live[c.Sandbox] = true
		} else {
			stale = append(stale, key)
		}
	}
	for _, k := range stale {
		_ = p.deleteConfig(k)
	}
	var errs []error
	for num := range p.names {
		if !live[num] {
			errs = append(errs, p.resetStats(num))
			delete(p.names, num)
		}
	}
	errs = append(errs, p.pruneBlocks(live))
	return errors.Join(append(errs, it.Err())...)
}
