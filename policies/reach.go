package policies

import (
	"fmt"
	"net/netip"
)

// Operator is what the appliance's operator adds to every policy it
// enforces (Invariant 7): settings of the appliance, not of the policy.
type Operator struct {
	// Allow are the operator's upstream allow-ranges (upstream.allow): a
	// lab's world in a non-public range such as 198.18.0.0/15. They
	// re-admit addresses the classifier calls non-public; they never
	// re-admit a [deny] cidr or the appliance's own addresses, nor an
	// IPv4-mapped IPv6 address (a lab's world answers in its own family;
	// a mapped answer is a rebinding attempt).
	Allow []netip.Prefix
	// Own are the appliance's own addresses: never reachable.
	Own []netip.Addr
}

// Reach is the outcome of the reachability rule for one address, in the
// order the rule tests them (smokescreen's classifyAddr).
type Reach uint8

const (
	ReachInvalid   Reach = iota // deny: not an address, or unspecified (0.0.0.0, ::)
	ReachOwn                    // deny: one of the appliance's own addresses
	ReachDenied                 // deny: a [deny] cidr names it
	ReachPublic                 // allow: a public address
	ReachCategory               // allow: the deciding category's cidrs name it
	ReachOperator               // allow: non-public, but the operator's upstream.allow names it
	ReachNonPublic              // deny: non-public and nothing names it
)

var reachNames = [...]string{"invalid", "own", "denied", "public", "category", "operator", "non-public"}

func (r Reach) String() string {
	if int(r) < len(reachNames) {
		return reachNames[r]
	}
	return fmt.Sprintf("reach(%d)", uint8(r))
}

// Allowed reports whether the outcome lets the address be used.
func (r Reach) Allowed() bool {
	return r == ReachPublic || r == ReachCategory || r == ReachOperator
}

// RuleUpstreamAllow names the operator's allow-ranges in AddrDecision.Rule
// (they are in the appliance config, not the policy).
const RuleUpstreamAllow = "upstream.allow"

// AddrDecision is whether one address may be reached for one verdict, and
// what made it so.
type AddrDecision struct {
	Addr  netip.Addr // the address decided, unmapped and without zone
	Reach Reach
	Class AddrClass // the classifier's class of Addr
	// Rule names the rule that decided when one did: "deny.cidrs[i]",
	// "categories.NAME.cidrs[i]", "upstream.allow[i]"; zero otherwise.
	Rule Rule
}

// Allowed reports whether the address may be reached.
func (d AddrDecision) Allowed() bool { return d.Reach.Allowed() }

// Reason says why, for events and logs: "198.18.0.10 (special-purpose):
// denied by deny.cidrs[0] (policy.toml:3:9)".
func (d AddrDecision) Reason() string {
	head := d.Addr.String() + " (" + d.Class.String() + ")"
	switch d.Reach {
	case ReachInvalid:
		return head + ": never reachable"
	case ReachOwn:
		return head + ": one of the appliance's own addresses"
	case ReachPublic:
		return head + ": public"
	case ReachNonPublic:
		return head + ": not public, and neither the category's cidrs nor upstream.allow name it"
	}
	verb := "allowed by "
	if !d.Allowed() {
		verb = "denied by "
	}
	return head + ": " + verb + d.Rule.String()
}

func (d AddrDecision) String() string { return d.Reach.String() + ": " + d.Reason() }

// Reach decides whether a may be reached for verdict v under this policy
// alone (no operator settings: no upstream allow-ranges, no own
// addresses). The appliance asks a Bound policy instead.
func (p *Policy) Reach(a netip.Addr, v Verdict) AddrDecision {
	return p.reach(a, v.Cat, nil)
}

// reach is the one ordered reachability rule (Invariant 7): the zero and
// unspecified addresses never; the appliance's own addresses never; a
// [deny] cidr never, whatever any category or the operator says; public
// addresses; then non-public ones only when the deciding category's cidrs
// or the operator's allow-ranges name them.
func (p *Policy) reach(a netip.Addr, cat *Category, op *Operator) AddrDecision {
	asGiven := a.WithZone("")
	a = asGiven.Unmap()
	d := AddrDecision{Addr: a, Class: Classify(a)}
	if !a.IsValid() || a.IsUnspecified() {
		d.Reach = ReachInvalid
		return d
	}
	if op != nil && op.own(a) {
		d.Reach, d.Class = ReachOwn, ClassOwn
		return d
	}
	if c := p.denyCIDR(a); c != nil {
		d.Reach, d.Rule = ReachDenied, c.rule
		return d
	}
	if d.Class.Public() {
		d.Reach = ReachPublic
		return d
	}
	if c := cat.cidrFor(a); c != nil {
		d.Reach, d.Rule = ReachCategory, c.rule
		return d
	}
	if i := op.allowIndex(asGiven); i >= 0 {
		d.Reach, d.Rule = ReachOperator, Rule{Name: fmt.Sprintf("%s[%d]", RuleUpstreamAllow, i)}
		return d
	}
	d.Reach = ReachNonPublic
	return d
}

// cidrFor returns the category's cidr that contains a; nil for a nil category.
func (c *Category) cidrFor(a netip.Addr) *cidrRule {
	if c == nil {
		return nil
	}
	for _, cr := range c.r.cidrs {
		if cr.prefix.Contains(a) {
			return cr
		}
	}
	return nil
}

func (o *Operator) own(a netip.Addr) bool {
	for _, x := range o.Own {
		if x.WithZone("").Unmap() == a {
			return true
		}
	}
	return false
}

// allowIndex is the index of the allow-range that contains a, -1 for none
// (and for a nil operator).
func (o *Operator) allowIndex(a netip.Addr) int {
	if o == nil {
		return -1
	}
	for i, p := range o.Allow {
		if p.Contains(a) {
			return i
		}
	}
	return -1
}

// Bound is a policy as one appliance enforces it: the compiled policy and
// the operator's settings. Decide is the policy's; Reach adds the
// operator. Make one per loaded policy version (a pointer), so caches
// keyed by the policy value never mix versions.
type Bound struct {
	*Policy
	op Operator
}

// Bind binds p to the operator's settings.
func Bind(p *Policy, op Operator) *Bound { return &Bound{Policy: p, op: op} }

// Reach decides whether a may be reached for verdict v: the policy's
// rule with the operator's allow-ranges and own addresses.
func (b *Bound) Reach(a netip.Addr, v Verdict) AddrDecision {
	return b.Policy.reach(a, v.Cat, &b.op)
}
