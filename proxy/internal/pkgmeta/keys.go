package pkgmeta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
		"versions", "time", "dist-tags", "info", "version", "install", "preinstall", "postinstall"} {
		m[strings.ToLower(k)] = k
	}
	return m
}()

// errAmbiguousKey is wrapped by checkKeys' error.
var errAmbiguousKey = errors.New("a member name that differs from one the clients read only by case")

// checkKeys refuses a JSON document with a member named like a known one
// but for case (see knownKeys). It reads the document once as tokens; a
// malformed document is left to the caller's own decode to report.
func checkKeys(doc []byte) error {
	type frame struct{ obj, name bool } // name: a member name comes next
	dec := json.NewDecoder(bytes.NewReader(doc))
	var stack []frame
	afterValue := func() {
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].name = true
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // io.EOF, or malformed: the caller's decode says which
		}
		if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].name {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
				afterValue()
				continue
			}
			if s, ok := tok.(string); ok {
				if want, known := knownKeys[strings.ToLower(s)]; known && want != s {
					return fmt.Errorf("member %q: %w (%q)", s, errAmbiguousKey, want)
				}
			}
			stack[n-1].name = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{obj: true, name: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		case json.Delim(']'), json.Delim('}'):
			stack = stack[:len(stack)-1]
			afterValue()
		default:
			afterValue()
		}
	}
}
