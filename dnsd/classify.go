package dnsd

import (
	"net/netip"

	"airlock/policies"
)

// defaultPublic is the shared address classifier from policies/.
func defaultPublic(a netip.Addr) bool { return policies.Classify(a).Public() }

// addrPolicy is implemented by policies whose [deny] cidrs and category
// cidrs decide which answer addresses a sandbox may be given
// (*policies.Policy has it). Without it dnsd keeps public addresses and the
// deciding category's cidrs.
type addrPolicy interface {
	AddrAllowed(a netip.Addr, cat *policies.Category) bool
}
