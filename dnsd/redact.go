package dnsd

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// A name an exfiltration guard refused carries the data it tried to send
// out in its labels, so the audit log keeps only the first redactKeep
// bytes of the labels below the destination, with a hash of the whole
// (docs/events.md, dns.qname_truncated).
const (
	redactKeep      = 8
	redactHashBytes = 16
	// redactMaxClear bounds the suffix kept in clear: a registrable domain
	// longer than this is itself data (an unlisted TLD makes every
	// "<data>.tld" registrable).
	redactMaxClear = 64
)

// redactName returns what the event stores of a guard-refused name (lower
// case, fully qualified): the name cut short, whether it was, and then the
// hex of the first redactHashBytes of the whole name's SHA-256. scope is
// the parent names_per_parent counted under ("" for the other guards);
// it stays in clear, as the registrable domain does.
func redactName(name, scope string) (string, bool, string) {
	fq := strings.TrimSuffix(name, ".")
	clear := clearSuffix(fq, strings.TrimSuffix(scope, "."))
	head := strings.TrimSuffix(fq[:len(fq)-len(clear)], ".")
	if len(head) <= redactKeep {
		return name, false, ""
	}
	sum := sha256.Sum256([]byte(name))
	out := head[:redactKeep] + "...(+" + strconv.Itoa(len(head)-redactKeep) + " bytes)."
	if clear != "" {
		out += clear + "."
	}
	return out, true, hex.EncodeToString(sum[:redactHashBytes])
}

// clearSuffix is the part of fq kept in clear: the longer of its
// registrable domain and scope, unless that is all of fq or too long to
// be only a destination; then its last label.
func clearSuffix(fq, scope string) string {
	clear, err := publicsuffix.EffectiveTLDPlusOne(fq)
	if err != nil {
		clear = ""
	}
	if len(scope) > len(clear) && strings.HasSuffix(fq, "."+scope) {
		clear = scope
	}
	if clear == fq || len(clear) > redactMaxClear {
		clear = fq[strings.LastIndexByte(fq, '.')+1:]
		if clear == fq || len(clear) > redactMaxClear {
			return ""
		}
	}
	return clear
}
