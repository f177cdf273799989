package policies

import (
	"net/netip"
	"strings"
	"testing"
)

const reachPolicy = `
version = 1

[deny]
cidrs = ["198.18.77.10", "10.66.0.0/16", "2001:db8:dead::/48", "203.0.114.66"]

[categories.lab]
kind = "public_web"
hosts = ["lab.example.test"]

[categories.internal_api]
hosts = ["api.corp.test"]
cidrs = ["10.20.0.0/16", "10.66.1.0/24", "fd00:20::/32", "198.18.88.0/24"]
routes = [{ methods = ["GET"], path = "/**" }]
`

var reachOperator = Operator{
	Allow: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.66.0.0/16")},
	Own:   []netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("::ffff:203.0.114.1")},
}

func TestReach(t *testing.T) {
	p := mustParse(t, reachPolicy)
	lab, _ := p.Category("lab")
	api, _ := p.Category("internal_api")
	b := Bind(p, reachOperator)
	cases := []struct {
		name     string
		addr     string // "" is the zero address
		cat      *Category
		operator bool // ask the Bound policy, not the bare one
		want     Reach
		rule     string
	}{
		{"zero address", "", lab, true, ReachInvalid, ""},
		{"unspecified v4", "0.0.0.0", api, true, ReachInvalid, ""},
		{"unspecified v6", "::", api, true, ReachInvalid, ""},
		{"own lab address", "198.18.0.1", lab, true, ReachOwn, ""},
		{"own address mapped", "::ffff:198.18.0.1", lab, true, ReachOwn, ""},
		{"own public address", "203.0.114.1", lab, true, ReachOwn, ""},
		{"own address without operator is only its class", "198.18.0.1", lab, false, ReachNonPublic, ""},
		{"own public address without operator", "203.0.114.1", lab, false, ReachPublic, ""},
		{"deny cidr inside upstream.allow", "198.18.77.10", lab, true, ReachDenied, "deny.cidrs[0]"},
		{"deny cidr inside upstream.allow, mapped", "::ffff:198.18.77.10", lab, true, ReachDenied, "deny.cidrs[0]"},
		{"deny cidr without operator", "198.18.77.10", lab, false, ReachDenied, "deny.cidrs[0]"},
		{"deny cidr inside category cidrs and upstream.allow", "10.66.1.5", api, true, ReachDenied, "deny.cidrs[1]"},
		{"deny cidr inside category cidrs", "10.66.1.5", api, false, ReachDenied, "deny.cidrs[1]"},
		{"deny cidr on a public address", "203.0.114.66", lab, true, ReachDenied, "deny.cidrs[3]"},
		{"deny cidr v6", "2001:db8:dead::1", api, true, ReachDenied, "deny.cidrs[2]"},
		{"lab range beside the deny cidr", "198.18.77.11", lab, true, ReachOperator, "upstream.allow[0]"},
		{"lab range top", "198.19.255.255", nil, true, ReachOperator, "upstream.allow[0]"},
		{"lab range without operator", "198.18.77.11", lab, false, ReachNonPublic, ""},
		{"category cidr wins over upstream.allow", "198.18.88.7", api, true, ReachCategory, "categories.internal_api.cidrs[3]"},
		{"just above the lab range", "198.20.0.1", lab, true, ReachPublic, ""},
		{"public", "203.0.114.5", nil, true, ReachPublic, ""},
		{"public without operator", "203.0.114.5", nil, false, ReachPublic, ""},
		{"category cidr private", "10.20.1.1", api, false, ReachCategory, "categories.internal_api.cidrs[0]"},
		{"category cidr mapped", "::ffff:10.20.1.1", api, true, ReachCategory, "categories.internal_api.cidrs[0]"},
		{"category cidr v6 ula", "fd00:20::1", api, true, ReachCategory, "categories.internal_api.cidrs[2]"},
		{"other category's cidr", "10.20.1.1", lab, true, ReachNonPublic, ""},
		{"no category", "10.20.1.1", nil, true, ReachNonPublic, ""},
		{"loopback named by upstream.allow", "127.0.0.1", lab, true, ReachOperator, "upstream.allow[1]"},
		{"loopback beside upstream.allow", "127.0.0.2", lab, true, ReachNonPublic, ""},
		{"mapped loopback is not re-admitted by upstream.allow", "::ffff:127.0.0.1", lab, true, ReachNonPublic, ""},
		{"mapped lab address is not re-admitted by upstream.allow", "::ffff:198.18.77.11", lab, true, ReachNonPublic, ""},
		{"metadata", "169.254.169.254", api, true, ReachNonPublic, ""},
		{"link-local v6 with zone", "fe80::1%eth0", api, true, ReachNonPublic, ""},
		{"nat64 of a lab address is not re-admitted", "64:ff9b::c612:4d0b", lab, true, ReachNonPublic, ""},
		{"6to4 of a lab address", "2002:c612:4d0b::1", lab, true, ReachNonPublic, ""},
		{"cgnat", "100.64.0.1", lab, true, ReachNonPublic, ""},
		{"multicast", "224.0.0.1", lab, true, ReachNonPublic, ""},
		{"broadcast", "255.255.255.255", lab, true, ReachNonPublic, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var a netip.Addr
			if tc.addr != "" {
				a = netip.MustParseAddr(tc.addr)
			}
			v := Verdict{Cat: tc.cat}
			d := p.Reach(a, v)
			if tc.operator {
				d = b.Reach(a, v)
			}
			if d.Reach != tc.want || d.Rule.Name != tc.rule {
				t.Fatalf("Reach(%s) = %v rule %q, want %v rule %q (%s)", tc.addr, d.Reach, d.Rule.Name, tc.want, tc.rule, d)
			}
			if d.Allowed() != (tc.want == ReachPublic || tc.want == ReachCategory || tc.want == ReachOperator) {
				t.Errorf("Allowed() = %v for %v", d.Allowed(), d.Reach)
			}
			if tc.rule != "" && !strings.Contains(d.Reason(), tc.rule) {
				t.Errorf("Reason() %q does not name the rule %s", d.Reason(), tc.rule)
			}
		})
	}
}

// TestReachAgreesWithDecide: a connect decision with an address applies
// the same rule as Reach, and names [deny] first whatever a category says.
func TestReachAgreesWithDecide(t *testing.T) {
	p := mustParse(t, reachPolicy)
	checkDecisions(t, p, []decideCase{
		{"connect lab.example.test:443 ip=198.18.77.10", ActionDeny, "deny.cidrs[0]"},
		{"connect lab.example.test:443 ip=198.18.77.11", ActionDeny, "categories.lab.cidrs"},
		{"connect lab.example.test:443 ip=0.0.0.0", ActionDeny, "categories.lab.cidrs"},
		{"connect api.corp.test:443 ip=10.66.1.5", ActionDeny, "deny.cidrs[1]"},
		{"connect api.corp.test:443 ip=10.20.1.1", ActionAllow, "categories.internal_api.hosts[0]"},
		{"connect 10.66.1.5:443", ActionDeny, "deny.cidrs[1]"},
	})
}

func TestReachStrings(t *testing.T) {
	p := mustParse(t, reachPolicy)
	lab, _ := p.Category("lab")
	d := Bind(p, reachOperator).Reach(netip.MustParseAddr("198.18.77.10"), Verdict{Cat: lab})
	want := "denied: 198.18.77.10 (special-purpose): denied by deny.cidrs[0] (t.toml:5:10)"
	if d.String() != want {
		t.Errorf("String() = %q, want %q", d.String(), want)
	}
	for r := ReachInvalid; r <= ReachNonPublic; r++ {
		if strings.HasPrefix(r.String(), "reach(") {
			t.Errorf("Reach %d has no name", r)
		}
	}
	if Reach(99).String() != "reach(99)" || Reach(99).Allowed() {
		t.Error("unknown Reach: want reach(99), not allowed")
	}
}
