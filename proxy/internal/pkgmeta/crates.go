package pkgmeta

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// A Cargo registry index file (the sparse protocol's /ab/cd/NAME, the
// same lines as a git index's file) has one JSON object per line, one
// per version: "vers", "cksum" (the .crate's sha256, hex) and, where
// the registry gives it, "pubtime" (RFC 3339). Cargo reads only the
// versions listed, so hiding a version is dropping its line.

type crateLine struct {
	Name    string `json:"name"`
	Vers    string `json:"vers"`
	Cksum   string `json:"cksum"`
	Pubtime string `json:"pubtime"`
}

// maxCrateLines bounds the versions of one index file.
const maxCrateLines = 1 << 16

// CratesIndexVersions reads an index file's versions. A line that is not
// a version with a sha256 cksum is an error naming the line.
func CratesIndexVersions(doc []byte) ([]Version, error) {
	var out []Version
	err := crateLines(doc, func(n int, line []byte, cl *crateLine) error {
		out = append(out, Version{Version: cl.Vers, Published: parseTime(cl.Pubtime), Integrity: HexSRI("sha256", cl.Cksum)})
		return nil
	})
	return out, err
}

// RewriteCratesIndex drops the lines of hidden versions.
func RewriteCratesIndex(doc []byte, hidden map[string]bool) ([]byte, error) {
	out := make([]byte, 0, len(doc))
	err := crateLines(doc, func(n int, line []byte, cl *crateLine) error {
		if !hidden[cl.Vers] {
			out = append(append(out, line...), '\n')
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func crateLines(doc []byte, f func(n int, line []byte, cl *crateLine) error) error {
	n := 0
	for rest := doc; len(rest) > 0; {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte{'\n'})
		n++
		line = bytes.TrimRight(line, "\r")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if n > maxCrateLines {
			return fmt.Errorf("crates index: over %d lines", maxCrateLines)
		}
		if err := checkKeys(line); err != nil {
			return fmt.Errorf("crates index line %d: %w", n, err)
		}
		var cl crateLine
		if err := json.Unmarshal(line, &cl); err != nil {
			return fmt.Errorf("crates index line %d: %w", n, err)
		}
		if cl.Vers == "" || HexSRI("sha256", cl.Cksum) == "" {
			return fmt.Errorf("crates index line %d: want a version (vers) and its sha256 (cksum)", n)
		}
		if err := f(n, line, &cl); err != nil {
			return err
		}
	}
	return nil
}
