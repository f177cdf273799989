package pkgmeta

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// knownKeys are the member names this package reads, by their lower case.
// encoding/json matches struct fields case-insensitively, but the clients
// (npm's JavaScript, pip's Python) read members exactly: a document whose
// version object holds "scripts" with a postinstall and a later "SCRIPTS":
// {} would be read here as having no install script while npm runs it, and
// a lone "Upload-Time" would give a file an age pip never sees. A name
// that equals one of these but for case is therefore refused (the caller
// fails closed), wherever it appears in the document.
var knownKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"digests", "dist", "filename", "files", "hasInstallScript", "hashes",
		"integrity", "releases", "scripts", "shasum", "upload-time", "upload_time_iso_8601",
		"versions", "time", "dist-tags", "info", "version", "install", "preinstall", "postinstall",
		"vers", "cksum", "pubtime"} {
		m[strings.ToLower(k)] = k
	}
	return m
}()

// errAmbiguousKey is wrapped by checkKeys' error.
var errAmbiguousKey = errors.New("a member name that differs from one the clients read only by case")

// checkKeys refuses a JSON document with a member named like a known one
// but for case (see knownKeys). It reads the bytes once: a string followed
// by ':' is a member name (in valid JSON; a malformed document is left to
// the caller's own decode to report). A name with escapes is decoded
// first, so "\u0053CRIPTS" is seen as what a decoder sees.
func checkKeys(doc []byte) error {
	for i := 0; i < len(doc); i++ {
		if doc[i] != '"' {
			continue
		}
		start, esc := i+1, false
		j := start
		for ; j < len(doc) && doc[j] != '"'; j++ {
			if doc[j] == '\\' {
				esc = true
				j++
			}
		}
		if j >= len(doc) {
			return nil
		}
		i = j
		k := j + 1
		for k < len(doc) && (doc[k] == ' ' || doc[k] == '\t' || doc[k] == '\n' || doc[k] == '\r') {
			k++
		}
		if k >= len(doc) || doc[k] != ':' {
			continue
		}
		name := string(doc[start:j])
		if esc {
			if err := json.Unmarshal(doc[start-1:j+1], &name); err != nil {
				continue
			}
		}
		if len(name) > 3*maxKnownKey { // a rune folding to ASCII takes at most 3 bytes
			continue
		}
		if want, known := knownKeys[fold(name)]; known && want != name {
			return fmt.Errorf("member %q: %w (%q)", name, errAmbiguousKey, want)
		}
	}
	return nil
}

// maxKnownKey is the longest of knownKeys, so longer names skip the lookup.
var maxKnownKey = func() int {
	n := 0
	for _, k := range knownKeys {
		n = max(n, len(k))
	}
	return n
}()

// fold is name under the case folding encoding/json matches fields with
// (bytes.EqualFold: Unicode simple folding), mapped to lower-case ASCII
// where it can be: besides the ASCII letters only U+212A KELVIN SIGN
// (unicode.ToLower gives 'k') and U+017F LATIN SMALL LETTER LONG S fold
// into ASCII.
func fold(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '\u017f' {
			return 's'
		}
		return unicode.ToLower(r)
	}, name)
}
