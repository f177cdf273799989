package runner

import (
	"fmt"
	"net/netip"
	"sync"

	"airlock/internal/netx"
)

// pool hands out /32 sandbox addresses from a prefix, never the network
// address, the broadcast address or the gateway.
type pool struct {
	mu     sync.Mutex
	prefix netip.Prefix
	gw     netip.Addr
	used   map[netip.Addr]bool
	next   netip.Addr
}

func newPool(prefix netip.Prefix, gw netip.Addr) (*pool, error) {
	prefix = prefix.Masked()
	if !prefix.Addr().Is4() || prefix.Bits() > 30 {
		return nil, fmt.Errorf("address pool %s: want an IPv4 prefix of /30 or larger", prefix)
	}
	if !gw.IsValid() {
		gw = prefix.Addr().Next()
	}
	if !gw.Is4() {
		return nil, fmt.Errorf("gateway %s: want an IPv4 address", gw)
	}
	return &pool{prefix: prefix, gw: gw, used: map[netip.Addr]bool{}, next: prefix.Addr().Next()}, nil
}

func (p *pool) usable(a netip.Addr) bool {
	return p.prefix.Contains(a) && a != p.prefix.Addr() && a != p.gw && a != netx.LastAddr(p.prefix)
}

// alloc returns the next free address, round robin, so a released address
// is reused as late as possible.
func (p *pool) alloc() (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.next
	for range 1 << (32 - p.prefix.Bits()) {
		if !p.prefix.Contains(a) {
			a = p.prefix.Addr()
		}
		if p.usable(a) && !p.used[a] {
			p.used[a] = true
			p.next = a.Next()
			return a, nil
		}
		a = a.Next()
	}
	return netip.Addr{}, fmt.Errorf("address pool %s exhausted (%d in use)", p.prefix, len(p.used))
}

// claim marks a (an adopted sandbox's address) as used.
func (p *pool) claim(a netip.Addr) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.usable(a) {
		return fmt.Errorf("address %s is not usable in pool %s", a, p.prefix)
	}
	if p.used[a] {
		return fmt.Errorf("address %s is already in use", a)
	}
	p.used[a] = true
	return nil
}

func (p *pool) release(a netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.used, a)
}
