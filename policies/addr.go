package policies

import (
	"fmt"
	"net/netip"
)

// AddrClass is the kind of an IP address as far as egress is concerned.
// Only ClassPublic is reachable without a rule that names the address.
type AddrClass uint8

const (
	ClassInvalid     AddrClass = iota // the zero netip.Addr
	ClassPublic                       // globally routable unicast
	ClassLoopback                     // 127/8, ::1
	ClassPrivate                      // RFC 1918, IPv6 ULA fc00::/7, site-local fec0::/10
	ClassLinkLocal                    // 169.254/16 (incl. the 169.254.169.254 metadata service), fe80::/10
	ClassCGNAT                        // 100.64.0.0/10 shared address space
	ClassSpecial                      // special-purpose: 0/8, 192.0.0/24, TEST-NETs, 198.18/15, 240/4, broadcast, 2001:db8::/32, ...
	ClassMulticast                    // 224/4, ff00::/8
	ClassEmbedded                     // IPv6 carrying an IPv4 address (NAT64, 6to4, Teredo) whose IPv4 part is public
	ClassUnspecified                  // 0.0.0.0, ::
	ClassOwn                          // one of the appliance's own addresses (Operator.Own; never from Classify)
)

var classNames = [...]string{"invalid", "public", "loopback", "private", "link-local", "cgnat",
	"special-purpose", "multicast", "ipv4-embedded", "unspecified", "own"}

func (c AddrClass) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// Public reports whether the class may be reached without a rule naming it.
func (c AddrClass) Public() bool { return c == ClassPublic }

type classRange struct {
	p netip.Prefix
	c AddrClass
}

var v6Ranges = []classRange{
	{netip.MustParsePrefix("::/128"), ClassUnspecified},
	{netip.MustParsePrefix("::1/128"), ClassLoopback},
	{netip.MustParsePrefix("::/96"), ClassSpecial},         // IPv4-compatible (deprecated)
	{netip.MustParsePrefix("100::/64"), ClassSpecial},      // discard
	{netip.MustParsePrefix("2001:db8::/32"), ClassSpecial}, // documentation
	{netip.MustParsePrefix("2001::/23"), ClassSpecial},     // IETF protocol assignments (Teredo handled first)
	{netip.MustParsePrefix("3fff::/20"), ClassSpecial},     // documentation (RFC 9637)
	{netip.MustParsePrefix("5f00::/16"), ClassSpecial},     // SRv6 SIDs
	{netip.MustParsePrefix("fc00::/7"), ClassPrivate},      // unique local
	{netip.MustParsePrefix("fe80::/10"), ClassLinkLocal},
	{netip.MustParsePrefix("fec0::/10"), ClassPrivate}, // site-local (deprecated)
	{netip.MustParsePrefix("ff00::/8"), ClassMulticast},
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	nat64102  = netip.MustParsePrefix("64:ff9b:1::/48") // local-use NAT64 (RFC 8215)
	sixToFour = netip.MustParsePrefix("2002::/16")
	teredo    = netip.MustParsePrefix("2001::/32")

	globalUnicast = netip.MustParsePrefix("2000::/3")
)

// Classify returns the class of an address. IPv4-mapped IPv6 is classified
// as its IPv4 address. NAT64, 6to4 and Teredo addresses take the class of
// the IPv4 address they carry when that is not public, and are
// ClassEmbedded (not public) otherwise: the appliance never translates them.
func Classify(a netip.Addr) AddrClass {
	if !a.IsValid() {
		return ClassInvalid
	}
	a = a.WithZone("")
	if a.Is4In6() {
		a = a.Unmap()
	}
	if a.Is4() {
		return classify4(a)
	}
	if v4, ok := embedded4(a); ok {
		if c := classify4(v4); c != ClassPublic {
			return c
		}
		return ClassEmbedded
	}
	for _, r := range v6Ranges {
		if r.p.Contains(a) {
			return r.c
		}
	}
	if !globalUnicast.Contains(a) {
		return ClassSpecial // not global unicast space
	}
	return ClassPublic
}

// classify4 classifies an IPv4 address by its octets (no loops: it is on
// every decision's path).
func classify4(a netip.Addr) AddrClass {
	b := a.As4()
	switch {
	case b == [4]byte{}:
		return ClassUnspecified
	case b[0] == 0: // "this network"
		return ClassSpecial
	case b[0] == 10:
		return ClassPrivate
	case b[0] == 100 && b[1]&0xc0 == 64: // 100.64.0.0/10
		return ClassCGNAT
	case b[0] == 127:
		return ClassLoopback
	case b[0] == 169 && b[1] == 254: // incl. 169.254.169.254 (metadata)
		return ClassLinkLocal
	case b[0] == 172 && b[1]&0xf0 == 16: // 172.16.0.0/12
		return ClassPrivate
	case b[0] == 192 && b[1] == 0 && (b[2] == 0 || b[2] == 2): // IETF protocol assignments, TEST-NET-1
		return ClassSpecial
	case b[0] == 192 && b[1] == 88 && b[2] == 99: // 6to4 relay anycast (deprecated)
		return ClassSpecial
	case b[0] == 192 && b[1] == 168:
		return ClassPrivate
	case b[0] == 198 && b[1]&0xfe == 18: // 198.18.0.0/15 benchmarking
		return ClassSpecial
	case b[0] == 198 && b[1] == 51 && b[2] == 100: // TEST-NET-2
		return ClassSpecial
	case b[0] == 203 && b[1] == 0 && b[2] == 113: // TEST-NET-3
		return ClassSpecial
	case b[0] >= 240: // reserved 240.0.0.0/4, incl. broadcast
		return ClassSpecial
	case b[0] >= 224:
		return ClassMulticast
	}
	return ClassPublic
}

// embedded4 extracts the IPv4 address inside a NAT64, 6to4 or Teredo address.
func embedded4(a netip.Addr) (netip.Addr, bool) {
	b := a.As16()
	switch {
	case nat64.Contains(a), nat64102.Contains(a):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	case teredo.Contains(a):
		// The client address is stored inverted in the last 32 bits.
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), true
	}
	return netip.Addr{}, false
}

// cidrRule is one prefix of a category's or [deny]'s cidrs.
type cidrRule struct {
	prefix netip.Prefix
	cat    *Category
	rule   Rule
	reason string
}
