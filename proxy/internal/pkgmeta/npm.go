// Package pkgmeta reads and rewrites package registry metadata: npm
// packuments, the PyPI simple index (HTML and PEP 691 JSON) and PyPI's
// JSON API. The proxy's release-age gate and denylists hide versions by
// rewriting it, so resolvers pick a version they may have. Input is
// hostile: every parser returns an error, never panics, and the caller
// bounds the size.
package pkgmeta

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Version is what the metadata says of one version.
type Version struct {
	Version       string
	Published     time.Time // zero when the metadata gives none
	InstallScript bool      // npm: hasInstallScript or an install-time script
	// Integrity is the version's artifact digest in Subresource Integrity
	// form ("sha512-BASE64"), "" when unknown (npm).
	Integrity string
	// Files are the digests of a PyPI version's files, by file name.
	Files map[string]string
}

// installScripts are the npm lifecycle scripts that run on install.
var installScripts = []string{"preinstall", "install", "postinstall"}

type npmVersion struct {
	HasInstallScript any            `json:"hasInstallScript"`
	Scripts          map[string]any `json:"scripts"`
	Dist             struct {
		Integrity any `json:"integrity"`
		Shasum    any `json:"shasum"`
	} `json:"dist"`
}

// integrity is the strongest digest dist names: integrity (the first
// sha512, sha384 or sha256 of its list), else the sha1 shasum.
func (nv *npmVersion) integrity() string {
	if s, ok := nv.Dist.Integrity.(string); ok {
		best := ""
		for f := range strings.FieldsSeq(s) {
			alg, _, _ := strings.Cut(f, "-")
			if rank(alg) > rank(algOf(best)) {
				best = f
			}
		}
		if best != "" {
			return best
		}
	}
	if s, ok := nv.Dist.Shasum.(string); ok {
		return HexSRI("sha1", s)
	}
	return ""
}

// NPMVersions lists the versions of a packument (full or abbreviated)
// with their publish times (from "time"), install scripts and digests.
// Top-level keys match exactly, as npm reads them. Only the values it
// reads are checked to be valid JSON (RewriteNPM checks the whole).
func NPMVersions(doc []byte) ([]Version, error) {
	if err := checkKeys(doc); err != nil {
		return nil, fmt.Errorf("npm packument: %w", err)
	}
	if !isObject(doc) {
		return nil, errors.New("npm packument: not a JSON object")
	}
	top, _, err := members(doc, skipSpace(doc, 0))
	if err != nil {
		return nil, fmt.Errorf("npm packument: %w", err)
	}
	versions, times := map[string]npmVersion{}, map[string]any{}
	for _, m := range top {
		var err error
		switch m.key {
		case "versions":
			err = json.Unmarshal(doc[m.valStart:m.end], &versions)
		case "time":
			err = json.Unmarshal(doc[m.valStart:m.end], &times)
		}
		if err != nil {
			return nil, fmt.Errorf("npm packument: %s: %w", m.key, err)
		}
	}
	out := make([]Version, 0, len(versions))
	for v, nv := range versions {
		s, _ := times[v].(string)
		out = append(out, Version{Version: v, Published: parseTime(s), InstallScript: nv.installs(), Integrity: nv.integrity()})
	}
	return out, nil
}

// isObject: the document's first byte (after white space) opens an object.
func isObject(doc []byte) bool {
	for _, c := range doc {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c == '{'
	}
	return false
}

func (nv *npmVersion) installs() bool {
	if b, ok := nv.HasInstallScript.(bool); ok && b {
		return true
	}
	for _, s := range installScripts {
		if v, ok := nv.Scripts[s]; ok && v != nil && v != "" {
			return true
		}
	}
	return false
}

// RewriteNPM removes the hidden versions from a packument: from
// "versions" and "time", and from "dist-tags", where "latest" moves to
// the newest version left that is not a pre-release (else the newest
// left) and any other tag naming a hidden version is dropped. Everything
// else is copied byte for byte.
func RewriteNPM(doc []byte, hidden map[string]bool) ([]byte, error) {
	if err := checkKeys(doc); err != nil {
		return nil, fmt.Errorf("npm packument: %w", err)
	}
	if !isObject(doc) || !json.Valid(doc) {
		return nil, errors.New("npm packument: not a JSON object")
	}
	top, _, err := members(doc, skipSpace(doc, 0))
	if err != nil {
		return nil, fmt.Errorf("npm packument: %w", err)
	}
	drop := func(k string) bool { return hidden[k] }
	var edits []edit
	left := map[string]json.RawMessage{}
	var tags *member
	for i := range top {
		m := &top[i]
		switch m.key {
		case "versions", "time":
			e, kept, err := dropIn(doc, m, drop)
			if err != nil {
				return nil, fmt.Errorf("npm packument: %s: %w", m.key, err)
			}
			if e != nil {
				edits = append(edits, *e)
			}
			if m.key == "versions" {
				for _, k := range kept {
					left[k] = nil
				}
			}
		case "dist-tags":
			tags = m
		}
	}
	var raw json.RawMessage
	if tags != nil {
		raw = doc[tags.valStart:tags.end]
	}
	newTags, err := npmTags(raw, left, hidden)
	if err != nil {
		return nil, err
	}
	if tags != nil {
		edits = append(edits, edit{tags.valStart, tags.end, newTags})
	} else {
		end := len(doc) - len(trimSpaceRight(doc))
		at := len(doc) - end - 1 // the closing brace
		sep := ","
		if len(top) == 0 {
			sep = ""
		}
		edits = append(edits, edit{at, at, append([]byte(sep+`"dist-tags":`), newTags...)})
	}
	return applyEdits(doc, edits), nil
}

type edit struct {
	start, end int
	repl       []byte
}

// dropIn rewrites the object value of m without the members drop names;
// it returns no edit when nothing is dropped (or the value is null), and
// the keys kept.
func dropIn(doc []byte, m *member, drop func(string) bool) (*edit, []string, error) {
	if string(doc[m.valStart:m.end]) == "null" {
		return nil, nil, nil
	}
	ms, _, err := members(doc, m.valStart)
	if err != nil {
		return nil, nil, err
	}
	var kept []string
	dropped := false
	for _, x := range ms {
		if drop(x.key) {
			dropped = true
		} else {
			kept = append(kept, x.key)
		}
	}
	if !dropped {
		return nil, kept, nil
	}
	return &edit{m.valStart, m.end, dropMembers(doc, ms, drop)}, kept, nil
}

func applyEdits(doc []byte, edits []edit) []byte {
	sort.Slice(edits, func(i, j int) bool { return edits[i].start < edits[j].start })
	out := make([]byte, 0, len(doc))
	at := 0
	for _, e := range edits {
		out = append(append(out, doc[at:e.start]...), e.repl...)
		at = e.end
	}
	return append(out, doc[at:]...)
}

func trimSpaceRight(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// npmTags fixes dist-tags (raw, nil when absent) for the versions left.
func npmTags(raw json.RawMessage, versions map[string]json.RawMessage, hidden map[string]bool) ([]byte, error) {
	tags := map[string]json.RawMessage{}
	if raw != nil {
		if err := json.Unmarshal(raw, &tags); err != nil {
			return nil, fmt.Errorf("npm packument: dist-tags: %w", err)
		}
		if tags == nil {
			tags = map[string]json.RawMessage{}
		}
	}
	var was string
	if r, ok := tags["latest"]; ok {
		_ = json.Unmarshal(r, &was)
	}
	for tag, r := range tags {
		var v string
		if json.Unmarshal(r, &v) != nil || hidden[v] {
			delete(tags, tag)
		}
	}
	if _, ok := tags["latest"]; !ok {
		if best := newest(versions, was); best != "" {
			tags["latest"], _ = json.Marshal(best)
		}
	}
	return json.Marshal(tags)
}

// newest is the highest version that is not a pre-release and not above
// the old latest (when one was set), else the highest that is not a
// pre-release, else the highest.
func newest(versions map[string]json.RawMessage, was string) string {
	if was != "" {
		below := map[string]json.RawMessage{}
		for v, raw := range versions {
			if !isPrerelease(v) && CompareSemver(v, was) <= 0 {
				below[v] = raw
			}
		}
		if len(below) > 0 {
			return newest(below, "")
		}
	}
	best, bestPre := "", ""
	for v := range versions {
		if isPrerelease(v) {
			if bestPre == "" || CompareSemver(v, bestPre) > 0 {
				bestPre = v
			}
			continue
		}
		if best == "" || CompareSemver(v, best) > 0 {
			best = v
		}
	}
	if best == "" {
		return bestPre
	}
	return best
}

// parseTime reads an RFC 3339 time; zero when it is not one.
func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t
		}
	}
	return time.Time{}
}
