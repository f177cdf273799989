package policies

import (
	"strings"
	"testing"
)

// Tests of the request facts beyond the request line (issue 14,
// "Requests"): mirror prefixes, ambiguous paths, method overrides, git
// writes, empty ports, DNS over HTTPS.

const mirrorPolicy = `version = 1
[categories.mirror]
kind = "registries"
hosts = ["artifactory.acme.test"]
packages = { allow = ["npm:left-pad", "pypi:requests"], deny = ["npm:event-stream<=3.3.6"] }

[categories.prefixed]
kind = "registries"
hosts = ["npm.acme.test"]
path_prefix = ["/npm/", "/api/npm/npm-remote/"]
packages = { allow = ["npm:left-pad"] }

[categories.open]
kind = "registries"
hosts = ["open.acme.test"]
`

func TestPackagesBehindMirrorPrefixes(t *testing.T) {
	p := mustParse(t, mirrorPolicy)
	const a = "GET https://artifactory.acme.test"
	checkDecisions(t, p, []decideCase{
		{a + "/event-stream/-/event-stream-3.3.6.tgz", ActionDeny, "categories.mirror.packages.deny[0]"},
		{a + "/api/npm/npm-remote/event-stream/-/event-stream-3.3.6.tgz", ActionDeny, "categories.mirror.packages.deny[0]"},
		{a + "/artifactory/api/npm/npm-remote/event-stream/-/event-stream-3.3.6.tgz", ActionDeny, "categories.mirror.packages.deny[0]"},
		{a + "/api/npm/npm-remote/evil-pkg", ActionDeny, "categories.mirror.packages.allow"},
		{a + "/repository/npm-proxy/evil-pkg/-/evil-pkg-1.0.0.tgz", ActionDeny, "categories.mirror.packages.allow"},
		{a + "/nexus/repository/npm-proxy/evil-pkg", ActionDeny, "categories.mirror.packages.allow"},
		{a + "/api/pypi/pypi-remote/simple/evilpkg/", ActionDeny, "categories.mirror.packages.allow"},
		// /npm/ is no layout it knows: not recognized, so denied.
		{a + "/npm/evil-pkg", ActionDeny, "categories.mirror.packages"},
		{a + "/npm/event-stream/-/event-stream-3.3.6.tgz", ActionDeny, "categories.mirror.packages"},
		{a + "/some/other/endpoint", ActionDeny, "categories.mirror.packages"},
		{a + "/api/npm/npm-remote/left-pad/-/left-pad-1.3.0.tgz", ActionAllow, "categories.mirror.packages.allow[0]"},
		{a + "/repository/npm-proxy/left-pad", ActionAllow, "categories.mirror.packages.allow[0]"},
		{a + "/api/pypi/pypi-remote/simple/requests/", ActionAllow, "categories.mirror.packages.allow[1]"},
		{a + "/api/npm/npm-remote/-/v1/search?text=x", ActionAllow, "categories.mirror.hosts[0]"},
		{a + "/-/ping", ActionAllow, "categories.mirror.hosts[0]"},
		// A configured prefix: only paths under it are read, from there.
		{"GET https://npm.acme.test/npm/left-pad", ActionAllow, "categories.prefixed.packages.allow[0]"},
		{"GET https://npm.acme.test/api/npm/npm-remote/left-pad/-/left-pad-1.3.0.tgz", ActionAllow, "categories.prefixed.packages.allow[0]"},
		{"GET https://npm.acme.test/npm/evil-pkg", ActionDeny, "categories.prefixed.packages.allow"},
		{"GET https://npm.acme.test/left-pad", ActionDeny, "categories.prefixed.packages"},
		{"GET https://npm.acme.test/other/left-pad", ActionDeny, "categories.prefixed.packages"},
		// Without package rules nothing changes.
		{"GET https://open.acme.test/anything/at/all", ActionAllow, "categories.open.hosts[0]"},
	})
	ex := p.Explain(mustReq(t, a+"/npm/evil-pkg"))
	if !strings.Contains(ex.Verdict.Reason, "not a package") || !strings.Contains(ex.Verdict.Reason, "path_prefix") {
		t.Errorf("reason %q does not say the path was not recognized", ex.Verdict.Reason)
	}
	found := false
	for _, c := range ex.Considered {
		found = found || c.Rule.Name == "categories.mirror.packages" && c.Rule.Pos.Line == 5
	}
	if !found {
		t.Errorf("explain does not show categories.mirror.packages at its line: %+v", ex.Considered)
	}
	v := p.Decide(mustReq(t, a+"/api/npm/npm-remote/left-pad/-/left-pad-1.3.0.tgz"))
	if v.Package != (Package{Ecosystem: "npm", Name: "left-pad", Version: "1.3.0"}) {
		t.Errorf("verdict package %+v", v.Package)
	}
}

func TestPathPrefixErrors(t *testing.T) {
	for _, bad := range []string{`"npm/"`, `"/npm"`, `"/a/../npm/"`, `[]`, `["/x/*/"]`, `3`} {
		src := "version = 1\n[categories.registries]\nhosts = [\"r.test\"]\npath_prefix = " + bad + "\n"
		if _, err := Parse("t.toml", []byte(src)); err == nil || !strings.Contains(err.Error(), "path_prefix") {
			t.Errorf("path_prefix = %s: error %v, want one naming path_prefix", bad, err)
		}
	}
	src := "version = 1\n[categories.git]\nhosts = [\"g.test\"]\npath_prefix = \"/x/\"\n"
	if _, err := Parse("t.toml", []byte(src)); err == nil || !strings.Contains(err.Error(), "only applies to registries") {
		t.Errorf("path_prefix on git: %v", err)
	}
}

func TestAmbiguousPathsDenied(t *testing.T) {
	p := mustParse(t, "version = 1\n[categories.public_web]\nhosts = [\"docs.test\"]\n")
	for _, path := range []string{
		"/a/%252e%252e/admin", "/a%00", "/a/%C0%AE%C0%AE/admin", "/a/%EF%BC%8E%EF%BC%8E/admin", "/a/x/..",
	} {
		v := p.Decide(mustReq(t, "GET https://docs.test"+path))
		if v.Action != ActionDeny || v.Rule.Name != "default" || !strings.Contains(v.Reason, "path") {
			t.Errorf("%s: %v by %s (%s), want deny by default", path, v.Action, v.Rule.Name, v.Reason)
		}
	}
}

const overridePolicy = `version = 1
[categories.public_web]
hosts = ["docs.test"]
methods = ["GET", "POST"]

[categories.internal_api]
hosts = ["api.test"]
routes = [{ methods = ["GET"], path = "/v1/**" }]

[categories.any]
kind = "public_web"
hosts = ["any.test"]
methods = ["*"]
`

func TestMethodOverrides(t *testing.T) {
	p := mustParse(t, overridePolicy)
	cases := []struct {
		req       string
		overrides []string
		action    Action
		rule      string
	}{
		{"POST https://docs.test/x", nil, ActionAllow, ""},
		{"POST https://docs.test/x", []string{"DELETE"}, ActionDeny, "categories.public_web.methods"},
		{"POST https://docs.test/x", []string{" delete "}, ActionDeny, "categories.public_web.methods"},
		{"POST https://docs.test/x", []string{"GET"}, ActionAllow, ""},
		{"POST https://docs.test/x", []string{"GET", "PUT"}, ActionDeny, "categories.public_web.methods"},
		{"POST https://docs.test/x", []string{"DELETE, GET"}, ActionDeny, "categories.public_web.methods"},
		{"POST https://docs.test/x", []string{""}, ActionDeny, "categories.public_web.methods"},
		{"POST https://docs.test/x?_method=DELETE", nil, ActionDeny, "categories.public_web.methods"},
		{"POST https://docs.test/x?a=1&%5Fmethod=put", nil, ActionDeny, "categories.public_web.methods"},
		{"POST https://docs.test/x?_METHOD=patch", nil, ActionDeny, "categories.public_web.methods"},
		{"POST https://docs.test/x?_method=GET", nil, ActionAllow, ""},
		{"GET https://api.test/v1/items", []string{"DELETE"}, ActionDeny, "categories.internal_api.routes"},
		{"GET https://api.test/v1/items", []string{"GET"}, ActionAllow, "categories.internal_api.routes[0]"},
		{"POST https://any.test/x", []string{"DELETE"}, ActionAllow, ""},
	}
	for _, tc := range cases {
		r := mustReq(t, tc.req)
		r.MethodOverrides = tc.overrides
		v := p.Decide(r)
		if v.Action != tc.action || tc.rule != "" && v.Rule.Name != tc.rule {
			t.Errorf("%s %q: %v by %s (%s), want %v by %s", tc.req, tc.overrides, v.Action, v.Rule.Name, v.Reason, tc.action, tc.rule)
		}
	}
}

func TestGitWritesClosedWithoutPush(t *testing.T) {
	p := mustParse(t, "version = 1\n[categories.git]\nhosts = [\"git.test\"]\nmethods = [\"GET\", \"HEAD\", \"POST\", \"PUT\"]\n"+
		"[categories.pushy]\nkind = \"git\"\nhosts = [\"push.test\"]\npush = true\n")
	const batch = "POST https://git.test/o/r.git/info/lfs/objects/batch"
	cases := []struct {
		req       string
		body      string
		truncated bool
		action    Action
	}{
		{batch, `{"operation":"download","objects":[{"oid":"x","size":1}]}`, false, ActionAllow},
		{batch, `{"operation":"upload","objects":[{"oid":"x","size":1}]}`, false, ActionDeny},
		{batch, `{"OPERATION":"upload"}`, false, ActionDeny},
		{batch, `{"operation":"download","operation":"upload"}`, false, ActionDeny},
		{batch, `{"operation":"download"}{"operation":"upload"}`, false, ActionDeny},
		{batch, `{"operation":"download","objects":[`, false, ActionDeny},
		{batch, `{"operation":"download"}`, true, ActionDeny},
		{batch, ``, false, ActionDeny},
		{batch, `{"objects":[]}`, false, ActionDeny},
		{"POST https://git.test/o/r.git/info/lfs/objects/BATCH/", `{"operation":"upload"}`, false, ActionDeny},
		{"PUT https://git.test/o/r.git/info/lfs/objects/abc", "data", false, ActionDeny},
		{"POST https://git.test/o/r.git/info/lfs/locks", `{"path":"a"}`, false, ActionDeny},
		{"POST https://git.test/o/r.git/git-upload-pack", "0000", false, ActionAllow},
		{"POST https://git.test/o/r.git/something-else", "", false, ActionDeny},
		{"GET https://git.test/o/r.git/info/lfs/objects/abc", "", false, ActionAllow},
		{"POST https://push.test/o/r.git/info/lfs/objects/batch", `{"operation":"upload"}`, false, ActionAllow},
	}
	for _, tc := range cases {
		r := mustReq(t, tc.req)
		if NeedsBody(&r) != strings.Contains(strings.ToLower(tc.req), "post https://git.test/o/r.git/info/lfs/objects/batch") &&
			!strings.Contains(tc.req, "push.test") {
			t.Errorf("%s: NeedsBody = %v", tc.req, NeedsBody(&r))
		}
		r.Body, r.BodyTruncated = []byte(tc.body), tc.truncated
		v := p.Decide(r)
		if v.Action != tc.action || tc.action == ActionDeny && !strings.HasSuffix(v.Rule.Name, ".push") {
			t.Errorf("%s %q: %v by %s (%s), want %v", tc.req, tc.body, v.Action, v.Rule.Name, v.Reason, tc.action)
		}
	}
}

func TestEmptyPortDenied(t *testing.T) {
	p := mustParse(t, "version = 1\n[categories.public_web]\nhosts = [\"allowed.test\"]\n")
	for _, r := range []Request{
		{Stage: StageHTTP, Method: "GET", Scheme: "https", Host: "allowed.test:", Path: "/"},
		{Stage: StageHTTP, Method: "GET", Scheme: "https", Host: "[2001:db8::1]:", Path: "/"},
		{Stage: StageConnect, Host: "allowed.test:"},
	} {
		if v := p.Decide(r); v.Action != ActionDeny || !strings.Contains(v.Reason, "empty port") {
			t.Errorf("%+v: %v (%s), want deny naming the empty port", r, v.Action, v.Reason)
		}
	}
	if v := p.Decide(Request{Stage: StageHTTP, Method: "GET", Scheme: "https", Host: "allowed.test:443", Path: "/"}); v.Action != ActionAllow {
		t.Errorf("allowed.test:443: %v (%s)", v.Action, v.Reason)
	}
}

func TestDoHBlocked(t *testing.T) {
	p := mustParse(t, "version = 1\n[categories.public_web]\nhosts = [\"docs.test\"]\nmethods = [\"GET\", \"POST\"]\n"+
		"[categories.resolver]\nkind = \"public_web\"\nhosts = [\"doh.test\"]\nmethods = [\"GET\", \"POST\"]\nallow_doh = true\n")
	cases := []struct {
		req, ct, accept string
		doh             bool
	}{
		{"POST https://docs.test/dns-query", "application/dns-message", "", true},
		{"GET https://docs.test/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB", "", "", true},
		{"GET https://docs.test/resolve?name=x.test", "", "application/dns-json", true},
		{"GET https://docs.test/x", "", "text/html, Application/DNS-Message;q=0.1", true},
		{"GET https://docs.test/x?%64ns=1", "", "", true},
		{"GET https://docs.test/x?dnsx=1", "", "", false},
		{"GET https://docs.test/x", "application/json", "*/*", false},
	}
	for _, tc := range cases {
		for _, host := range []string{"docs.test", "doh.test"} {
			r := mustReq(t, strings.Replace(tc.req, "docs.test", host, 1))
			r.ContentType, r.Accept = tc.ct, tc.accept
			v := p.Decide(r)
			wantDeny := tc.doh && host == "docs.test"
			if wantDeny != (v.Action == ActionDeny) || wantDeny && (v.Rule.Name != "categories.public_web.allow_doh" || !strings.HasPrefix(v.Reason, "doh_blocked")) {
				t.Errorf("%s on %s (ct %q accept %q): %v by %s (%s)", tc.req, host, tc.ct, tc.accept, v.Action, v.Rule.Name, v.Reason)
			}
		}
	}
}
