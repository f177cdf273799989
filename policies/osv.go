package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"airlock/internal/safefile"
)

// Advisory is one OSV record that marks versions of a package malicious
// (the MAL- advisories of the OpenSSF malicious-packages data set).
type Advisory struct {
	ID      string // "MAL-2025-1234"
	Summary string
	File    string // where it was loaded from
}

// Code is the denial code of the advisory: "osv:MAL-…".
func (a Advisory) Code() string { return "osv:" + a.ID }

// Verdict is the denial of a version the advisory names, in a category
// of the given mode (would_deny in audit mode).
func (a Advisory) Verdict(mode Mode) GateVerdict {
	return GateVerdict{Action: ActionDeny, Rule: Rule{Name: "packages.osv", Pos: Position{File: a.File}},
		Code: a.Code(), Reason: a.Code() + ": " + a.Summary}.In(mode)
}

// Advisories is a malicious-package denylist, matched by ecosystem, name
// and version. Read-only once loaded; the zero value matches nothing.
type Advisories struct {
	byPkg map[string][]affected // "eco|name" in match form
	files int
}

type affected struct {
	adv      *Advisory
	versions map[string]bool
	ranges   []osvRange
	all      bool // no versions and no ranges: every version
}

type osvRange struct {
	introduced, fixed, lastAffected string
}

// Len is how many package entries are loaded.
func (a *Advisories) Len() int {
	if a == nil {
		return 0
	}
	n := 0
	for _, l := range a.byPkg {
		n += len(l)
	}
	return n
}

// Files is how many advisory files were loaded.
func (a *Advisories) Files() int {
	if a == nil {
		return 0
	}
	return a.files
}

// Match returns the advisory that marks pkg's version malicious. A
// package without a version (metadata) matches only an advisory that
// covers every version.
func (a *Advisories) Match(pkg Package) (Advisory, bool) {
	if a == nil || len(a.byPkg) == 0 {
		return Advisory{}, false
	}
	for _, af := range a.byPkg[pkg.Ecosystem+"|"+matchName(pkg.Ecosystem, pkg.Name)] {
		if af.matches(pkg.Version) {
			return *af.adv, true
		}
	}
	return Advisory{}, false
}

func (af *affected) matches(v string) bool {
	if af.all {
		return true
	}
	if v == "" {
		return false
	}
	if af.versions[v] {
		return true
	}
	for _, r := range af.ranges {
		if r.contains(v) {
			return true
		}
	}
	return false
}

// unbounded: every version ("introduced": "0" and no end).
func (r osvRange) unbounded() bool {
	return (r.introduced == "" || r.introduced == "0") && r.fixed == "" && r.lastAffected == ""
}

func (r osvRange) contains(v string) bool {
	if r.introduced != "" && r.introduced != "0" && compareVersions(v, r.introduced) < 0 {
		return false
	}
	if r.fixed != "" && compareVersions(v, r.fixed) >= 0 {
		return false
	}
	if r.lastAffected != "" && compareVersions(v, r.lastAffected) > 0 {
		return false
	}
	return true
}

// osvEcosystems maps OSV ecosystem names to Airlock's; others are skipped.
var osvEcosystems = map[string]string{"npm": "npm", "PyPI": "pypi", "crates.io": "crates", "Go": "go", "Debian": "debian"}

// maxOSVFile bounds one advisory file.
const maxOSVFile = 1 << 20

// maxOSVFiles bounds the files loaded from all directories.
const maxOSVFiles = 500000

type osvDoc struct {
	ID       string `json:"id"`
	Summary  string `json:"summary"`
	Affected []struct {
		Package *struct {
			Ecosystem string `json:"ecosystem"`
			Name      string `json:"name"`
		} `json:"package"`
		Versions []string `json:"versions"`
		Ranges   []struct {
			Type   string              `json:"type"`
			Events []map[string]string `json:"events"`
		} `json:"ranges"`
	} `json:"affected"`
}

// LoadOSV reads every *.json file under dirs (recursively) as an OSV
// advisory. Every malformed file is an error naming the file (and the
// line, for a syntax error); nothing is loaded then.
func LoadOSV(dirs []string) (*Advisories, error) {
	a := &Advisories{byPkg: map[string][]affected{}}
	var errs []error
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !strings.HasSuffix(p, ".json") {
				return nil
			}
			if a.files++; a.files > maxOSVFiles {
				return fmt.Errorf("more than %d advisory files", maxOSVFiles)
			}
			data, err := safefile.Read(p, maxOSVFile)
			if err != nil {
				errs = append(errs, err)
				return nil
			}
			if err := a.add(p, data); err != nil {
				errs = append(errs, err)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("osv %s: %w", dir, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return a, nil
}

// ParseOSV parses one advisory file's bytes (file names it in errors).
func ParseOSV(file string, data []byte) (*Advisories, error) {
	a := &Advisories{byPkg: map[string][]affected{}, files: 1}
	if err := a.add(file, data); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *Advisories) add(file string, data []byte) error {
	var doc osvDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("%s: %w", jsonPlace(file, data, err), err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		off := dec.InputOffset()
		return fmt.Errorf("%s: data after the advisory's object", jsonPlace(file, data, &json.SyntaxError{Offset: off}))
	}
	if doc.ID == "" {
		return fmt.Errorf("%s:1: id: missing", file)
	}
	adv := &Advisory{ID: doc.ID, Summary: doc.Summary, File: file}
	for i, af := range doc.Affected {
		at := fmt.Sprintf("%s:%d: %s affected[%d]", file, lineOfKey(data, "affected"), doc.ID, i)
		if af.Package == nil || af.Package.Name == "" || af.Package.Ecosystem == "" {
			return fmt.Errorf("%s.package: want an ecosystem and a name", at)
		}
		eco, ok := osvEcosystems[strings.SplitN(af.Package.Ecosystem, ":", 2)[0]]
		if !ok {
			continue // an ecosystem Airlock does not recognize downloads of
		}
		e := affected{adv: adv, versions: map[string]bool{}}
		for _, v := range af.Versions {
			e.versions[v] = true
		}
		for j, r := range af.Ranges {
			rg, err := parseRange(r.Events)
			if err != nil {
				return fmt.Errorf("%s.ranges[%d]: %w", at, j, err)
			}
			e.ranges = append(e.ranges, rg...)
		}
		e.all = len(af.Versions) == 0 && len(af.Ranges) == 0
		for _, r := range e.ranges {
			e.all = e.all || r.unbounded()
		}
		key := eco + "|" + matchName(eco, af.Package.Name)
		a.byPkg[key] = append(a.byPkg[key], e)
	}
	return nil
}

// parseRange turns OSV events into ranges: each "introduced" opens one,
// closed by the next "fixed" or "last_affected".
func parseRange(events []map[string]string) ([]osvRange, error) {
	var out []osvRange
	open := false
	for i, ev := range events {
		if len(ev) != 1 {
			return nil, fmt.Errorf("events[%d]: want one of introduced, fixed, last_affected, limit", i)
		}
		for k, v := range ev {
			switch k {
			case "introduced":
				out, open = append(out, osvRange{introduced: v}), true
			case "fixed", "last_affected":
				if !open {
					return nil, fmt.Errorf("events[%d]: %s without introduced", i, k)
				}
				if k == "fixed" {
					out[len(out)-1].fixed = v
				} else {
					out[len(out)-1].lastAffected = v
				}
				open = false
			case "limit":
			default:
				return nil, fmt.Errorf("events[%d]: unknown event %q", i, k)
			}
		}
	}
	return out, nil
}

// jsonPlace is "file:line:col" of a JSON decoding error.
func jsonPlace(file string, data []byte, err error) string {
	var off int64 = -1
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
	}
	if off < 0 || off > int64(len(data)) {
		return file
	}
	line := 1 + bytes.Count(data[:off], []byte{'\n'})
	col := int(off) - bytes.LastIndexByte(data[:off], '\n') - 1 // the offset is just past the bad byte
	col = max(col, 1)
	return fmt.Sprintf("%s:%d:%d", file, line, col)
}

// lineOfKey is the line of the first "key": in data (1 when absent).
func lineOfKey(data []byte, key string) int {
	i := bytes.Index(data, []byte(`"`+key+`"`))
	if i < 0 {
		return 1
	}
	return 1 + bytes.Count(data[:i], []byte{'\n'})
}

// Summary lists the loaded advisories' ids, sorted (for logs and tests).
func (a *Advisories) Summary() []string {
	if a == nil {
		return nil
	}
	seen := map[string]bool{}
	for _, l := range a.byPkg {
		for _, af := range l {
			seen[af.adv.ID] = true
		}
	}
	out := make([]string, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}
