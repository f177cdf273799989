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
// with their publish times (from "time") and install scripts, in one
// pass over the document.
func NPMVersions(doc []byte) ([]Version, error) {
	if !isObject(doc) {
		return nil, errors.New("npm packument: not a JSON object")
	}
	var d struct {
		Versions map[string]npmVersion `json:"versions"`
		Time     map[string]any        `json:"time"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("npm packument: %w", err)
	}
	out := make([]Version, 0, len(d.Versions))
	for v, nv := range d.Versions {
		s, _ := d.Time[v].(string)
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

func npmParse(doc []byte) (map[string]json.RawMessage, map[string]json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil {
		return nil, nil, fmt.Errorf("npm packument: %w", err)
	}
	if top == nil {
		return nil, nil, errors.New("npm packument: not a JSON object")
	}
	var versions map[string]json.RawMessage
	if raw, ok := top["versions"]; ok {
		if err := json.Unmarshal(raw, &versions); err != nil {
			return nil, nil, fmt.Errorf("npm packument: versions: %w", err)
		}
	}
	return top, versions, nil
}

// RewriteNPM removes the hidden versions from a packument: from
// "versions" and "time", and from "dist-tags", where "latest" moves to
// the newest version left that is not a pre-release (else the newest
// left) and any other tag naming a hidden version is dropped.
func RewriteNPM(doc []byte, hidden map[string]bool) ([]byte, error) {
	top, versions, err := npmParse(doc)
	if err != nil {
		return nil, err
	}
	for v := range hidden {
		delete(versions, v)
	}
	if top["versions"] != nil {
		top["versions"] = marshalRaw(versions)
	}
	if err := npmTimes(top, hidden); err != nil {
		return nil, err
	}
	if err := npmTags(top, versions, hidden); err != nil {
		return nil, err
	}
	return marshalRaw(top), nil
}

// marshalRaw writes an object of values that are valid JSON already
// (they come from Unmarshal), without encoding/json compacting each
// again; keys are sorted.
func marshalRaw(m map[string]json.RawMessage) []byte {
	keys := make([]string, 0, len(m))
	n := 2
	for k, v := range m {
		keys = append(keys, k)
		n += len(k) + len(v) + 8
	}
	sort.Strings(keys)
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		kb, _ := json.Marshal(k) // a string always marshals
		b = append(append(b, kb...), ':')
		if v := m[k]; v != nil {
			b = append(b, v...)
		} else {
			b = append(b, "null"...)
		}
	}
	return append(b, '}')
}

func npmTimes(top map[string]json.RawMessage, hidden map[string]bool) error {
	raw, ok := top["time"]
	if !ok {
		return nil
	}
	var t map[string]json.RawMessage
	if err := json.Unmarshal(raw, &t); err != nil {
		return fmt.Errorf("npm packument: time: %w", err)
	}
	for v := range hidden {
		delete(t, v)
	}
	var err error
	top["time"], err = json.Marshal(t)
	return err
}

func npmTags(top, versions map[string]json.RawMessage, hidden map[string]bool) error {
	tags := map[string]json.RawMessage{}
	if raw, ok := top["dist-tags"]; ok {
		if err := json.Unmarshal(raw, &tags); err != nil {
			return fmt.Errorf("npm packument: dist-tags: %w", err)
		}
	}
	var was string
	if raw, ok := tags["latest"]; ok {
		_ = json.Unmarshal(raw, &was)
	}
	for tag, raw := range tags {
		var v string
		if json.Unmarshal(raw, &v) != nil || hidden[v] {
			delete(tags, tag)
		}
	}
	if _, ok := tags["latest"]; !ok {
		if best := newest(versions, was); best != "" {
			tags["latest"], _ = json.Marshal(best)
		}
	}
	var err error
	top["dist-tags"], err = json.Marshal(tags)
	return err
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
