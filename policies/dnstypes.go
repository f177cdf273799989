package policies

import (
	"strconv"
	"strings"
)

var qtypeNames = map[string]uint16{
	"A": 1, "NS": 2, "CNAME": 5, "SOA": 6, "NULL": 10, "PTR": 12, "HINFO": 13, "MX": 15, "TXT": 16,
	"AAAA": 28, "SRV": 33, "NAPTR": 35, "DS": 43, "RRSIG": 46, "NSEC": 47, "DNSKEY": 48,
	"TLSA": 52, "SVCB": 64, "HTTPS": 65, "ANY": 255, "CAA": 257,
}

// ParseQType reads a DNS query type name ("TXT") or "TYPEnn".
func ParseQType(s string) (uint16, bool) {
	u := strings.ToUpper(s)
	if t, ok := qtypeNames[u]; ok {
		return t, true
	}
	if n, ok := strings.CutPrefix(u, "TYPE"); ok {
		v, err := strconv.ParseUint(n, 10, 16)
		return uint16(v), err == nil && v > 0
	}
	return 0, false
}

// QTypeString names a DNS query type.
func QTypeString(t uint16) string {
	for k, v := range qtypeNames {
		if v == t {
			return k
		}
	}
	return "TYPE" + strconv.Itoa(int(t))
}

func hasQType(list []uint16, t uint16) bool {
	for _, x := range list {
		if x == t {
			return true
		}
	}
	return false
}
