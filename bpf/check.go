package bpf

import (
	"fmt"

	"github.com/cilium/ebpf/link"
)

// Verify checks that interface ifindex is attached as sandbox num: its
// pinned TCX link is live on that interface and its configuration names
// the sandbox (CNI CHECK). The error says what is missing.
func (p *Path) Verify(ifindex int, num uint32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, err := link.LoadPinnedLink(p.linkPin(ifindex), nil)
	if err != nil {
		return fmt.Errorf("bpf: interface %d has no pinned link: %w", ifindex, err)
	}
	defer l.Close()
	if got := tcxIfindex(l); got != ifindex {
		return fmt.Errorf("bpf: the pinned link of interface %d is defunct (attached to %d)", ifindex, got)
	}
	var c steerSbxConfig
	if err := p.objs.AlkConfig.Lookup(uint32(ifindex), &c); err != nil {
		return fmt.Errorf("bpf: interface %d has no configuration: %w", ifindex, err)
	}
	if c.Sandbox != num {
		return fmt.Errorf("bpf: interface %d is configured for sandbox %d, not %d", ifindex, c.Sandbox, num)
	}
	return nil
}
