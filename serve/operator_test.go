package serve

import (
	"net/netip"
	"slices"
	"testing"
)

// TestOperatorOwnAddresses: the operator settings bound to every policy
// carry upstream.allow and name the gateway and the host's addresses as
// the appliance's own.
func TestOperatorOwnAddresses(t *testing.T) {
	cfg := &Config{}
	cfg.Network.Gateway = netip.MustParseAddr("198.18.0.1")
	cfg.Upstream.Allow = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}
	op, err := operator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(op.Allow, cfg.Upstream.Allow) {
		t.Errorf("Allow = %v, want %v", op.Allow, cfg.Upstream.Allow)
	}
	for _, want := range []string{"198.18.0.1", "127.0.0.1"} {
		if !slices.Contains(op.Own, netip.MustParseAddr(want)) {
			t.Errorf("Own = %v, want %s in it", op.Own, want)
		}
	}
}
