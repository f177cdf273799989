package policies

import (
	"strings"
	"testing"
)

// FuzzNormalizePath: NormalizePath never panics, and what it accepts is a
// fixed point (forwarding the normal form and normalizing again changes
// nothing) with no dot segment, no NUL and no doubled escape left.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/a/../b", "/a/%252e", "/%C0%AE", "/\uff0e\uff0e/x", "/a/x/..", "/@s%2fn", "/100%25", "/a//b/./c/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		n, err := NormalizePath(p)
		if err != nil || len(n) > maxPath { // escaping may grow a path past the limit
			return
		}
		again, err := NormalizePath(n)
		if err != nil || again != n {
			t.Fatalf("NormalizePath(%.80q) = %.80q, but normalizing that again gives %.80q, %v", p, n, again, err)
		}
		for _, seg := range strings.Split(n, "/") {
			if dot, dotdot := isDotSeg(seg); dot || dotdot {
				t.Fatalf("NormalizePath(%q) = %q keeps a dot segment", p, n)
			}
		}
		if strings.Contains(n, "%00") || strings.Contains(n, "//") {
			t.Fatalf("NormalizePath(%q) = %q", p, n)
		}
	})
}

// FuzzRequestFacts: the facts Decide reads beyond the request line (method
// overrides, DoH shapes, LFS batch bodies, mirror layouts) never panic,
// and a git category without push never lets an LFS upload through.
func FuzzRequestFacts(f *testing.F) {
	p, err := Parse("f.toml", []byte(`version = 1
[categories.git]
hosts = ["git.test"]
methods = ["*"]
[categories.registries]
hosts = ["reg.test"]
packages = { allow = ["npm:left-pad"] }
[categories.public_web]
hosts = ["web.test"]
`))
	if err != nil {
		f.Fatal(err)
	}
	f.Add("POST", "git.test", "/o/r.git/info/lfs/objects/batch", "", "DELETE", "application/dns-message", `{"operation":"upload"}`)
	f.Add("GET", "reg.test", "/api/npm/r/left-pad", "_method=PUT", "", "", "")
	f.Add("GET", "reg.test", "/repository/r/@s/n/-/n-1.0.tgz", "dns=AAAB", "get", "", "")
	f.Fuzz(func(t *testing.T, method, host, path, query, override, ctype, body string) {
		r := Request{Stage: StageHTTP, Method: method, Scheme: "https", Host: host, Path: path, Query: query,
			ContentType: ctype, Accept: ctype, Body: []byte(body)}
		if override != "" {
			r.MethodOverrides = []string{override}
		}
		v := p.Decide(r)
		if v.Action.Allows() && v.Category == "git" && NeedsBody(&r) {
			if op, err := lfsOperation(r.Body); err != nil || op != "download" {
				t.Fatalf("LFS batch %q allowed: %+v", body, v)
			}
		}
		p.Explain(r)
		stripLayout("/" + strings.TrimPrefix(path, "/"))
		registryMeta(path)
	})
}
