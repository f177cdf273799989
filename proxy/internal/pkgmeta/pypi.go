package pkgmeta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"strings"
	"time"

	"golang.org/x/net/html"

	"airlock/policies"
)

// FileVersion is the version a PyPI distribution file name carries
// ("pkg-1.0-py3-none-any.whl", "pkg-1.0.tar.gz"), "" when none.
func FileVersion(filename string) string {
	pkg, ok := policies.RecognizePackage("", "/packages/"+path.Base(filename))
	if !ok {
		return ""
	}
	return pkg.Version
}

type simpleFile struct {
	Filename   string         `json:"filename"`
	UploadTime any            `json:"upload-time"`
	Hashes     map[string]any `json:"hashes"`
}

func sha256Of(hashes map[string]any) string {
	s, _ := hashes["sha256"].(string)
	return HexSRI("sha256", s)
}

// SimpleJSONVersions lists the versions of a PEP 691 project page, each
// published at the earliest upload-time (PEP 700) of its files.
func SimpleJSONVersions(doc []byte) ([]Version, error) {
	if err := checkKeys(doc); err != nil {
		return nil, fmt.Errorf("pypi simple json: %w", err)
	}
	var page struct {
		Files []simpleFile `json:"files"`
	}
	if err := json.Unmarshal(doc, &page); err != nil {
		return nil, fmt.Errorf("pypi simple json: %w", err)
	}
	acc := versionAcc{}
	for _, f := range page.Files {
		s, _ := f.UploadTime.(string)
		acc.add(FileVersion(f.Filename), parseTime(s))
		acc.file(f.Filename, sha256Of(f.Hashes))
	}
	return acc.list(), nil
}

// versionAcc collects a version's earliest upload time and its files'
// digests.
type versionAcc map[string]*Version

func (a versionAcc) add(v string, t time.Time) {
	if v == "" {
		return
	}
	old := a[v]
	if old == nil {
		a[v] = &Version{Version: v, Published: t}
		return
	}
	if old.Published.IsZero() || !t.IsZero() && t.Before(old.Published) {
		old.Published = t
	}
}

// file records a file's digest under its version (added first).
func (a versionAcc) file(name, sri string) {
	v := a[FileVersion(name)]
	if v == nil || sri == "" {
		return
	}
	if v.Files == nil {
		v.Files = map[string]string{}
	}
	v.Files[path.Base(name)] = sri
}

func (a versionAcc) list() []Version {
	out := make([]Version, 0, len(a))
	for _, v := range a {
		out = append(out, *v)
	}
	return out
}

// RewriteSimpleJSON removes the files of hidden versions from a PEP 691
// project page, and the versions from its PEP 700 "versions" list.
func RewriteSimpleJSON(doc []byte, hidden map[string]bool) ([]byte, error) {
	return RewriteSimpleJSONFiles(doc, hidden, byVersion(hidden))
}

// byVersion hides the files of hidden versions.
func byVersion(hidden map[string]bool) func(string) bool {
	return func(f string) bool { return hidden[FileVersion(f)] }
}

// RewriteSimpleJSONFiles removes the files hideFile names and the
// hidden versions from a PEP 691 project page.
func RewriteSimpleJSONFiles(doc []byte, hidden map[string]bool, hideFile func(string) bool) ([]byte, error) {
	if err := checkKeys(doc); err != nil {
		return nil, fmt.Errorf("pypi simple json: %w", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil || top == nil {
		return nil, fmt.Errorf("pypi simple json: not a JSON object: %v", err)
	}
	var files []json.RawMessage
	if raw, ok := top["files"]; ok {
		if err := json.Unmarshal(raw, &files); err != nil {
			return nil, fmt.Errorf("pypi simple json: files: %w", err)
		}
	}
	kept := files[:0]
	for _, raw := range files {
		var f simpleFile
		if err := json.Unmarshal(raw, &f); err != nil {
			return nil, fmt.Errorf("pypi simple json: files: %w", err)
		}
		if !hideFile(f.Filename) {
			kept = append(kept, raw)
		}
	}
	var err error
	if top["files"] != nil {
		if top["files"], err = json.Marshal(kept); err != nil {
			return nil, err
		}
	}
	if raw, ok := top["versions"]; ok {
		var vs []string
		if err := json.Unmarshal(raw, &vs); err != nil {
			return nil, fmt.Errorf("pypi simple json: versions: %w", err)
		}
		out := []string{}
		for _, v := range vs {
			if !hidden[v] {
				out = append(out, v)
			}
		}
		top["versions"], _ = json.Marshal(out)
	}
	return json.Marshal(top)
}

// RewriteSimpleHTML removes the links to files of hidden versions from a
// PEP 503 project page; everything else is copied byte for byte.
func RewriteSimpleHTML(doc []byte, hidden map[string]bool) ([]byte, error) {
	return RewriteSimpleHTMLFiles(doc, byVersion(hidden))
}

// RewriteSimpleHTMLFiles removes the links to the files hideFile names.
func RewriteSimpleHTMLFiles(doc []byte, hideFile func(string) bool) ([]byte, error) {
	z := html.NewTokenizer(bytes.NewReader(doc))
	var out bytes.Buffer
	skip := false
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			if errors.Is(z.Err(), io.EOF) {
				return out.Bytes(), nil
			}
			return nil, fmt.Errorf("pypi simple html: %w", z.Err())
		}
		raw := z.Raw()
		name, _ := z.TagName()
		switch {
		case tt == html.SelfClosingTagToken && string(name) == "a":
			if hideFile(hrefFile(z)) {
				continue
			}
		case tt == html.StartTagToken && string(name) == "a":
			skip = hideFile(hrefFile(z))
		case tt == html.EndTagToken && string(name) == "a" && skip:
			skip = false
			continue
		}
		if !skip {
			out.Write(raw)
		}
	}
}

// hrefFile is the file name an anchor's href names (its last path
// segment, without the fragment). It reads the tag's attributes, so the
// caller must have copied Raw before.
func hrefFile(z *html.Tokenizer) string {
	if u := hrefURL(z); u != nil {
		return path.Base(u.Path)
	}
	return ""
}

func hrefURL(z *html.Tokenizer) *url.URL {
	for {
		k, v, more := z.TagAttr()
		if string(k) == "href" {
			u, err := url.Parse(strings.TrimSpace(string(v)))
			if err != nil {
				return nil
			}
			return u
		}
		if !more {
			return nil
		}
	}
}

type pypiFile struct {
	Filename   string         `json:"filename"`
	UploadTime any            `json:"upload_time_iso_8601"`
	Digests    map[string]any `json:"digests"`
}

// PyPIJSONVersions lists the releases of a /pypi/NAME/json document,
// each published at the earliest upload time of its files.
func PyPIJSONVersions(doc []byte) ([]Version, error) {
	if err := checkKeys(doc); err != nil {
		return nil, fmt.Errorf("pypi json: %w", err)
	}
	var d struct {
		Releases map[string][]pypiFile `json:"releases"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("pypi json: %w", err)
	}
	acc := versionAcc{}
	for v, files := range d.Releases {
		acc.add(v, time.Time{})
		for _, f := range files {
			s, _ := f.UploadTime.(string)
			acc.add(v, parseTime(s))
			if FileVersion(f.Filename) == v {
				acc.file(f.Filename, sha256Of(f.Digests))
			}
		}
	}
	return acc.list(), nil
}

// RewritePyPIJSON removes hidden releases from a /pypi/NAME/json
// document; when info.version is hidden, it becomes the newest release
// left and "urls" (that version's files) is emptied.
func RewritePyPIJSON(doc []byte, hidden map[string]bool) ([]byte, error) {
	return RewritePyPIJSONFiles(doc, hidden, nil)
}

// RewritePyPIJSONFiles is RewritePyPIJSON that also removes the files
// hideFile names (nil: none) from every release and from "urls".
func RewritePyPIJSONFiles(doc []byte, hidden map[string]bool, hideFile func(string) bool) ([]byte, error) {
	if err := checkKeys(doc); err != nil {
		return nil, fmt.Errorf("pypi json: %w", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil || top == nil {
		return nil, fmt.Errorf("pypi json: not a JSON object: %v", err)
	}
	rel := map[string]json.RawMessage{}
	if raw, ok := top["releases"]; ok {
		if err := json.Unmarshal(raw, &rel); err != nil {
			return nil, fmt.Errorf("pypi json: releases: %w", err)
		}
		// Every release must read as the gate reads it (a list of file
		// objects): one that does not would pass through unread.
		var files map[string][]pypiFile
		if err := json.Unmarshal(raw, &files); err != nil {
			return nil, fmt.Errorf("pypi json: releases: %w", err)
		}
		for v := range hidden {
			delete(rel, v)
		}
		if hideFile != nil {
			for v, raw := range rel {
				kept, err := filterFiles(raw, hideFile)
				if err != nil {
					return nil, fmt.Errorf("pypi json: releases[%q]: %w", v, err)
				}
				rel[v] = kept
			}
		}
		top["releases"], _ = json.Marshal(rel)
	}
	if raw, ok := top["urls"]; ok && hideFile != nil {
		kept, err := filterFiles(raw, hideFile)
		if err != nil {
			return nil, fmt.Errorf("pypi json: urls: %w", err)
		}
		top["urls"] = kept
	}
	if raw, ok := top["info"]; ok {
		var info map[string]json.RawMessage
		if err := json.Unmarshal(raw, &info); err != nil {
			return nil, fmt.Errorf("pypi json: info: %w", err)
		}
		var cur string
		_ = json.Unmarshal(info["version"], &cur)
		if hidden[cur] {
			info["version"], _ = json.Marshal(newest(rel, ""))
			top["info"], _ = json.Marshal(info)
			top["urls"] = json.RawMessage("[]")
		}
	}
	return json.Marshal(top)
}

// SimpleHTMLVersions lists the versions of the files a PEP 503 project
// page links to.
func SimpleHTMLVersions(doc []byte) []string {
	z := html.NewTokenizer(bytes.NewReader(doc))
	seen := map[string]bool{}
	var out []string
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			return out
		}
		if name, _ := z.TagName(); (tt == html.StartTagToken || tt == html.SelfClosingTagToken) && string(name) == "a" {
			if v := FileVersion(hrefFile(z)); v != "" && !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
}

// SimpleHTMLFiles are the sha256 digests (SRI form) a PEP 503 page's
// links carry in their "#sha256=" fragments, by file name.
func SimpleHTMLFiles(doc []byte) map[string]string {
	z := html.NewTokenizer(bytes.NewReader(doc))
	out := map[string]string{}
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			return out
		}
		name, _ := z.TagName()
		if (tt != html.StartTagToken && tt != html.SelfClosingTagToken) || string(name) != "a" {
			continue
		}
		if u := hrefURL(z); u != nil {
			if h, ok := strings.CutPrefix(u.Fragment, "sha256="); ok {
				if sri := HexSRI("sha256", h); sri != "" {
					out[path.Base(u.Path)] = sri
				}
			}
		}
	}
}

// filterFiles removes the files hideFile names from a JSON list of
// {"filename": …} objects.
func filterFiles(raw json.RawMessage, hideFile func(string) bool) (json.RawMessage, error) {
	var files []json.RawMessage
	if err := json.Unmarshal(raw, &files); err != nil {
		return nil, err
	}
	kept := []json.RawMessage{}
	for _, f := range files {
		var pf pypiFile
		if err := json.Unmarshal(f, &pf); err != nil {
			return nil, err
		}
		if !hideFile(pf.Filename) {
			kept = append(kept, f)
		}
	}
	return json.Marshal(kept)
}
