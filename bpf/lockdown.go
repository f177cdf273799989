package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// Block is a bit set of who holds a sandbox's network cut (the value of its
// slot in alk_lockdown). The program drops every packet of a sandbox whose
// value has any bit set, with reason lockdown; independent holders (an
// incident lockdown, a pause) set and clear only their own bit, so lifting
// one never lifts the other.
type Block uint32

const (
	// BlockLockdown is `airlock lockdown --sandbox ID`.
	BlockLockdown Block = 1 << 0
	// BlockPause is reserved for pausing a sandbox.
	BlockPause Block = 1 << 1
)

// globalSlot is the slot of alk_lockdown that cuts every sandbox (sandbox
// id 0 is never a sandbox: it counts unconfigured interfaces).
const globalSlot uint32 = 0

// SetLockdown turns the kill switch on or off: with it on, the program drops
// every packet of every sandbox (those attached later too) before parsing
// it. It is one write to one array slot: its cost does not grow with the
// number of sandboxes, and it is in force for the next packet on every CPU.
// The flag lives in a pinned map, so it outlives this process.
func (p *Path) SetLockdown(on bool) error {
	var v uint32
	if on {
		v = uint32(BlockLockdown)
	}
	if err := p.objs.AlkLockdown.Update(globalSlot, v, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("bpf: set lockdown %v: %w", on, err)
	}
	return nil
}

// Lockdown reports whether the kill switch is on (as pinned: a previous
// process may have set it).
func (p *Path) Lockdown() (bool, error) {
	var v uint32
	if err := p.objs.AlkLockdown.Lookup(globalSlot, &v); err != nil {
		return false, fmt.Errorf("bpf: read lockdown: %w", err)
	}
	return v != 0, nil
}

// ErrBadSandbox is returned for a sandbox id outside 1..MaxSandboxes-1.
var ErrBadSandbox = errors.New("sandbox id out of range")

// BlockSandbox sets (on) or clears b in sandbox num's block: while any bit
// is set, every packet of that sandbox is dropped. num is the SandboxID.Num
// the sandbox was attached with. The block stays across Detach and
// re-Attach of the same id in this process only until Detach: Detach and
// Reconcile clear the blocks of ids they retire, so a later sandbox given
// the same id starts unblocked.
func (p *Path) BlockSandbox(num uint32, b Block, on bool) error {
	if num == 0 || num >= MaxSandboxes {
		return fmt.Errorf("bpf: block sandbox %d: %w", num, ErrBadSandbox)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var v uint32
	if err := p.objs.AlkLockdown.Lookup(num, &v); err != nil {
		return fmt.Errorf("bpf: block sandbox %d: %w", num, err)
	}
	if on {
		v |= uint32(b)
	} else {
		v &^= uint32(b)
	}
	if err := p.objs.AlkLockdown.Update(num, v, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("bpf: block sandbox %d: %w", num, err)
	}
	return nil
}

// SandboxBlock returns sandbox num's block bits (0: not blocked).
func (p *Path) SandboxBlock(num uint32) (Block, error) {
	if num == 0 || num >= MaxSandboxes {
		return 0, fmt.Errorf("bpf: sandbox %d: %w", num, ErrBadSandbox)
	}
	var v uint32
	if err := p.objs.AlkLockdown.Lookup(num, &v); err != nil {
		return 0, fmt.Errorf("bpf: read block of sandbox %d: %w", num, err)
	}
	return Block(v), nil
}

// clearBlock removes every block of a sandbox id that is retired (p.mu
// held).
func (p *Path) clearBlock(num uint32) error {
	if num == 0 || num >= MaxSandboxes {
		return nil
	}
	return p.objs.AlkLockdown.Update(num, uint32(0), ebpf.UpdateExist)
}

// pruneBlocks clears the blocks of sandbox ids not in live (p.mu held).
func (p *Path) pruneBlocks(live map[uint32]bool) error {
	var (
		num uint32
		v   uint32
		old []uint32
	)
	it := p.objs.AlkLockdown.Iterate()
	for it.Next(&num, &v) {
		if num != globalSlot && v != 0 && !live[num] {
			old = append(old, num)
		}
	}
	errs := []error{it.Err()}
	for _, n := range old {
		errs = append(errs, p.clearBlock(n))
	}
	return errors.Join(errs...)
}
