package netx

import (
	"net/netip"
	"testing"
)

func TestLastAddr(t *testing.T) {
	for in, want := range map[string]string{
		"198.18.0.0/24":   "198.18.0.255",
		"198.18.0.77/24":  "198.18.0.255", // not masked
		"198.19.128.0/17": "198.19.255.255",
		"10.0.0.0/8":      "10.255.255.255",
		"198.18.5.6/32":   "198.18.5.6",
		"0.0.0.0/0":       "255.255.255.255",
	} {
		if got := LastAddr(netip.MustParsePrefix(in)); got != netip.MustParseAddr(want) {
			t.Errorf("LastAddr(%s) = %s, want %s", in, got, want)
		}
	}
}
