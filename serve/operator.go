package serve

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"airlock/policies"
)

// operator is what the appliance config adds to every policy it enforces
// (Invariant 7): the upstream allow-ranges, and the appliance's own
// addresses — the sandbox gateway and every address on the host's
// interfaces when serve starts — which no sandbox may reach.
func operator(cfg *Config) (policies.Operator, error) {
	own, err := hostAddrs()
	if err != nil {
		return policies.Operator{}, err
	}
	if g := cfg.Network.Gateway; g.IsValid() && !slices.Contains(own, g.Unmap()) {
		own = append(own, g.Unmap())
	}
	return policies.Operator{Allow: cfg.Upstream.Allow, Own: own}, nil
}

// hostAddrs lists the addresses on the host's interfaces.
func hostAddrs() ([]netip.Addr, error) {
	ifAddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("the appliance's own addresses: %w", err)
	}
	var out []netip.Addr
	for _, ia := range ifAddrs {
		n, ok := ia.(*net.IPNet)
		if !ok {
			continue
		}
		if a, ok := netip.AddrFromSlice(n.IP); ok && !slices.Contains(out, a.Unmap()) {
			out = append(out, a.Unmap())
		}
	}
	return out, nil
}
