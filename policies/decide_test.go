package policies

import (
	"net/netip"
	"strings"
	"testing"
)

func mustParse(t *testing.T, src string) *Policy {
	t.Helper()
	p, err := Parse("t.toml", []byte(src))
	if err != nil {
		t.Fatalf("Parse:\n%v", err)
	}
	return p
}

func mustReq(t *testing.T, line string) Request {
	t.Helper()
	r, err := ParseRequest(line)
	if err != nil {
		t.Fatalf("ParseRequest(%q): %v", line, err)
	}
	return r
}

type decideCase struct {
	req    string
	action Action
	rule   string // "" = not checked
}

func checkDecisions(t *testing.T, p *Policy, cases []decideCase) {
	t.Helper()
	for _, tc := range cases {
		v := p.Decide(mustReq(t, tc.req))
		if v.Action != tc.action || (tc.rule != "" && v.Rule.Name != tc.rule) {
			t.Errorf("%s\n  got  %v by %s (%s)\n  want %v by %s", tc.req, v.Action, v.Rule.Name, v.Reason, tc.action, tc.rule)
		}
		if v.WouldDeny && v.Action != ActionAudit {
			t.Errorf("%s: action %v with would_deny %v", tc.req, v.Action, v.WouldDeny)
		}
	}
}

const precedencePolicy = `
version = 1
[deny]
hosts = ["evil.corp.test"]
cidrs = ["198.18.9.0/24"]

[categories.public_web]
hosts = ["*.corp.test", "shared.test", "askme.test"]
action = "audit"

[categories.broad_deny]
kind = "public_web"
hosts = ["*.blocked.test", "shared.test"]
action = "deny"

[categories.api_ask]
kind = "public_web"
hosts = ["api.corp.test", "askme.test"]
action = "ask"

[categories.docs]
kind = "public_web"
hosts = ["docs.corp.test", "*.docs.corp.test", "inner.blocked.test", "askme.test"]
`

func TestPrecedence(t *testing.T) {
	p := mustParse(t, precedencePolicy)
	checkDecisions(t, p, []decideCase{
		// [deny] wins over every category, even a more specific one.
		{"connect evil.corp.test:443", ActionDeny, "deny.hosts[0]"},
		{"connect docs.corp.test:443 ip=198.18.9.7", ActionDeny, "deny.cidrs[0]"},
		// The most specific pattern wins between categories.
		{"GET https://docs.corp.test/", ActionAllow, "categories.docs.hosts[0]"},
		{"GET https://a.docs.corp.test/", ActionAllow, "categories.docs.hosts[1]"},
		{"GET https://other.corp.test/", ActionAudit, "categories.public_web.hosts[0]"},
		{"GET https://api.corp.test/", ActionAsk, "categories.api_ask.hosts[0]"},
		// An inspected ask category opens the connection; each request asks.
		{"connect api.corp.test:443", ActionAllow, "categories.api_ask.hosts[0]"},
		{"dns api.corp.test", ActionAllow, "categories.api_ask.hosts[0]"},
		{"dns x.blocked.test", ActionDeny, "categories.broad_deny.action"},
		// An exact name beats a wildcard even when the wildcard category denies.
		{"GET https://inner.blocked.test/", ActionAllow, "categories.docs.hosts[2]"},
		{"GET https://x.blocked.test/", ActionDeny, "categories.broad_deny.action"},
		// Ties on the same pattern: explicit deny > rule deny > ask > audit > allow.
		{"GET https://shared.test/", ActionDeny, "categories.broad_deny.action"},
		{"GET https://askme.test/", ActionAsk, "categories.api_ask.hosts[1]"},
		// Default deny.
		{"GET https://corp.test/", ActionDeny, "default"},
		{"dns nowhere.test", ActionDeny, "default"},
	})
}

// TestTieMoreRestrictiveWins: a host listed in two categories is decided
// by the more restrictive of their verdicts, never by the looser one
// (users.md S7: a broad registries category overrode staging's routes).
func TestTieMoreRestrictiveWins(t *testing.T) {
	p := mustParse(t, `
version = 1
[categories.registries]
hosts = ["both.test", "api.staging.test", "watched.test"]
[categories.webhooks]
hosts = ["both.test"]
paths = ["/hook"]
[categories.staging]
kind = "internal_api"
hosts = ["api.staging.test"]
routes = [{ methods = ["GET"], path = "/v2/items/*" }]
[categories.watch]
kind = "public_web"
hosts = ["watched.test"]
action = "audit"
`)
	checkDecisions(t, p, []decideCase{
		{"POST https://both.test/hook", ActionDeny, "categories.registries.methods"},
		{"GET https://both.test/left-pad", ActionDeny, "categories.webhooks.paths"},
		{"DELETE https://both.test/hook", ActionDeny, ""},
		{"GET https://api.staging.test/v2/secret", ActionDeny, "categories.staging.routes"},
		{"GET https://api.staging.test/v2/items/1", ActionAllow, ""},
		{"GET https://watched.test/", ActionAudit, "categories.watch.hosts[0]"},
	})
}

func TestAuditMode(t *testing.T) {
	p := mustParse(t, `
version = 1
mode = "audit"
[deny]
hosts = ["bad.test"]
[categories.git]
hosts = ["git.test"]
[categories.strict]
kind = "public_web"
mode = "enforce"
hosts = ["strict.test"]
`)
	cases := []struct {
		req       string
		action    Action
		wouldDeny bool
		rule      string
	}{
		{"GET https://git.test/o/r.git/info/refs?service=git-upload-pack", ActionAllow, false, "categories.git.hosts[0]"},
		{"POST https://git.test/o/r.git/git-receive-pack", ActionAudit, true, "categories.git.push"},
		{"connect elsewhere.test:443", ActionAudit, true, "default"},
		{"connect bad.test:443", ActionAudit, true, "deny.hosts[0]"},
		{"POST https://strict.test/", ActionDeny, false, "categories.strict.methods"},
		{"GET https://strict.test/", ActionAllow, false, "categories.strict.hosts[0]"},
	}
	for _, tc := range cases {
		v := p.Decide(mustReq(t, tc.req))
		if v.Action != tc.action || v.WouldDeny != tc.wouldDeny || v.Rule.Name != tc.rule {
			t.Errorf("%s: got %v would_deny=%v by %s, want %v would_deny=%v by %s",
				tc.req, v.Action, v.WouldDeny, v.Rule.Name, tc.action, tc.wouldDeny, tc.rule)
		}
	}
}

func TestGitPushDeniedInEverySpelling(t *testing.T) {
	p := mustParse(t, `
version = 1
[categories.git]
hosts = ["git.example.test"]
`)
	pushes := []string{
		"GET https://git.example.test/o/r.git/info/refs?service=git-receive-pack",
		"GET https://git.example.test/o/r/info/refs?service=git-receive-pack",
		"POST https://git.example.test/o/r.git/git-receive-pack",
		"POST https://git.example.test/o/r/git-receive-pack",
		"POST https://git.example.test/o/r.git/GIT-RECEIVE-PACK",
		"POST https://git.example.test/o/r.git/Git-Receive-Pack",
		"POST https://git.example.test/o/r.git/git%2Dreceive%2Dpack",
		"POST https://git.example.test/o/r.git/git-%72eceive-pack",
		"POST https://git.example.test/o/r.git/%67%69%74-receive-pack",
		"POST https://git.example.test/o/r.git/git-receive-pack/",
		"POST https://git.example.test/o/r.git//git-receive-pack",
		"POST https://git.example.test//o//r.git///git-receive-pack",
		"POST https://git.example.test/o/r.git/./git-receive-pack",
		"POST https://git.example.test/o/r.git/x/../git-receive-pack",
		"POST https://git.example.test/o/r.git/x/%2e%2e/git-receive-pack",
		"POST https://git.example.test/o/r.git/git-receive-pack;x",
		"POST https://git.example.test/o/r.git/git-receive-pack?x=1",
		"GET https://git.example.test/o/r.git/info/refs?service=GIT-RECEIVE-PACK",
		"GET https://git.example.test/o/r.git/info/refs?service=git%2Dreceive%2Dpack",
		"GET https://git.example.test/o/r.git/info/refs?SERVICE=git-receive-pack",
		"GET https://git.example.test/o/r.git/info/refs?a=b&service=git-receive-pack",
		"GET https://git.example.test/o/r.git/info/refs?service=git-receive-pack&service=git-upload-pack",
		"GET https://git.example.test/o/r.git/info/%72efs?service=git-receive-pack",
		"GET https://GIT.example.test./o/r.git/info/refs?service=git-receive-pack",
		"GET https://git.example.test:443/o/r.git/info/refs?service=git-receive-pack",
	}
	// Double encoding is refused before the push rule looks at it.
	if v := p.Decide(mustReq(t, "POST https://git.example.test/o/r.git/git%252Dreceive-pack")); v.Action != ActionDeny || v.Rule.Name != "default" {
		t.Errorf("git%%252Dreceive-pack: got %v by %s, want deny by default", v.Action, v.Rule.Name)
	}
	for _, line := range pushes {
		v := p.Decide(mustReq(t, line))
		if v.Action != ActionDeny || v.Rule.Name != "categories.git.push" {
			t.Errorf("%s: got %v by %s (%s), want deny by categories.git.push", line, v.Action, v.Rule.Name, v.Reason)
		}
	}
	fetches := []string{
		"GET https://git.example.test/o/r.git/info/refs?service=git-upload-pack",
		"POST https://git.example.test/o/r.git/git-upload-pack",
		"GET https://git.example.test/o/r.git/HEAD",
	}
	for _, line := range fetches {
		if v := p.Decide(mustReq(t, line)); v.Action != ActionAllow {
			t.Errorf("%s: got %v by %s (%s), want allow", line, v.Action, v.Rule.Name, v.Reason)
		}
	}
	// A raw request line with a literal Host header the proxy passes on.
	raw := Request{Stage: StageHTTP, Method: "POST", Scheme: "https", Host: "Git.Example.Test:443",
		Path: "/o/r.git/git-r%65ceive-pack"}
	if v := p.Decide(raw); v.Action != ActionDeny {
		t.Errorf("raw request: got %v", v.Action)
	}
	pushOK := mustParse(t, "version = 1\n[categories.git]\nhosts = [\"git.example.test\"]\npush = true\n")
	if v := pushOK.Decide(mustReq(t, pushes[2])); v.Action != ActionAllow {
		t.Errorf("push = true: got %v by %s", v.Action, v.Rule.Name)
	}
}

func TestGitRepos(t *testing.T) {
	p := mustParse(t, `
version = 1
[categories.git]
hosts = ["git.test"]
repos = ["acme/*", "tools/lint"]
`)
	checkDecisions(t, p, []decideCase{
		{"GET https://git.test/acme/app.git/info/refs?service=git-upload-pack", ActionAllow, "categories.git.hosts[0]"},
		{"GET https://git.test/ACME/App/info/refs?service=git-upload-pack", ActionAllow, ""},
		{"GET https://git.test/tools/lint.git/info/refs?service=git-upload-pack", ActionAllow, ""},
		{"GET https://git.test/tools/other.git/info/refs?service=git-upload-pack", ActionDeny, "categories.git.repos"},
		{"GET https://git.test/acme/../evil/x.git/info/refs", ActionDeny, "categories.git.repos"},
		{"GET https://git.test/acme%2F..%2Fevil/x.git/info/refs", ActionDeny, "categories.git.repos"},
		{"GET https://git.test/", ActionDeny, "categories.git.repos"},
	})
}

func TestRegistries(t *testing.T) {
	p := mustParse(t, `
version = 1
[categories.registries]
hosts = ["reg.test"]
methods = ["GET", "HEAD", "POST"]
packages = { allow = ["npm:left-pad", "npm:@good/*", "pypi:requests>=2.0"], deny = ["npm:@good/bad", "go:example.test/evil/*"] }
`)
	checkDecisions(t, p, []decideCase{
		{"GET https://reg.test/left-pad", ActionAllow, "categories.registries.packages.allow[0]"},
		{"GET https://reg.test/left-pad/-/left-pad-1.3.0.tgz", ActionAllow, "categories.registries.packages.allow[0]"},
		{"GET https://reg.test/Left-Pad", ActionAllow, "categories.registries.packages.allow[0]"},
		{"GET https://reg.test/right-pad", ActionDeny, "categories.registries.packages.allow"},
		{"GET https://reg.test/@good/thing/-/thing-2.0.0.tgz", ActionAllow, "categories.registries.packages.allow[1]"},
		{"GET https://reg.test/@good%2fthing", ActionAllow, "categories.registries.packages.allow[1]"},
		{"GET https://reg.test/@good/bad/-/bad-1.0.0.tgz", ActionDeny, "categories.registries.packages.deny[0]"},
		{"GET https://reg.test/@good%2Fbad", ActionDeny, "categories.registries.packages.deny[0]"},
		{"GET https://reg.test/packages/aa/bb/requests-2.31.0.tar.gz", ActionAllow, "categories.registries.packages.allow[2]"},
		{"GET https://reg.test/packages/aa/bb/requests-1.9.0-py2-none-any.whl", ActionDeny, "categories.registries.packages.allow"},
		{"GET https://reg.test/simple/Requests/", ActionAllow, "categories.registries.packages.allow[2]"},
		{"GET https://reg.test/example.test/evil/mod/@v/v1.0.0.zip", ActionDeny, "categories.registries.packages.deny[1]"},
		{"GET https://reg.test/example.test/!evil/mod/@v/list", ActionDeny, "categories.registries.packages.deny[1]"},
		{"GET https://reg.test/example.test/fine/@v/v1.0.0.zip", ActionAllow, "categories.registries.hosts[0]"},
		{"PUT https://reg.test/left-pad", ActionDeny, "categories.registries.publish"},
		{"DELETE https://reg.test/left-pad/-rev/1-abc", ActionDeny, "categories.registries.publish"},
		{"POST https://reg.test/legacy/", ActionDeny, "categories.registries.publish"},
		{"POST https://reg.test/api/v1/crates/new", ActionDeny, "categories.registries.publish"},
		{"POST https://reg.test/-/npm/v1/security/advisories/bulk", ActionAllow, "categories.registries.hosts[0]"},
		{"PATCH https://reg.test/x", ActionDeny, "categories.registries.publish"},
		{"GET https://reg.test/x package=npm:left-pad@1.0.0", ActionAllow, "categories.registries.packages.allow[0]"},
		{"GET https://reg.test/x package=npm:evil@1.0.0", ActionDeny, "categories.registries.packages.allow"},
	})
	readOnly := mustParse(t, "version = 1\n[categories.registries]\nhosts = [\"reg.test\"]\n")
	checkDecisions(t, readOnly, []decideCase{
		{"GET https://reg.test/left-pad", ActionAllow, ""},
		{"HEAD https://reg.test/left-pad", ActionAllow, ""},
		{"POST https://reg.test/-/npm/v1/security/advisories/bulk", ActionDeny, "categories.registries.methods"},
		{"PUT https://reg.test/left-pad", ActionDeny, "categories.registries.publish"},
	})
}

func TestRecognizePackage(t *testing.T) {
	cases := []struct {
		path string
		want Package
		ok   bool
	}{
		{"/left-pad", Package{"npm", "left-pad", ""}, true},
		{"/left-pad/-/left-pad-1.3.0.tgz", Package{"npm", "left-pad", "1.3.0"}, true},
		{"/@scope/name", Package{"npm", "@scope/name", ""}, true},
		{"/@scope%2fname", Package{"npm", "@scope/name", ""}, true},
		{"/@scope/name/-/name-1.0.0-beta.1.tgz", Package{"npm", "@scope/name", "1.0.0-beta.1"}, true},
		{"/-/v1/search", Package{}, false},
		{"/simple/requests/", Package{"pypi", "requests", ""}, true},
		{"/simple/Zope.Interface/", Package{"pypi", "zope-interface", ""}, true},
		{"/packages/ab/cd/ef/requests-2.31.0.tar.gz", Package{"pypi", "requests", "2.31.0"}, true},
		{"/packages/ab/cd/ef/zope_interface-6.0-cp311-cp311-manylinux_x86_64.whl", Package{"pypi", "zope-interface", "6.0"}, true},
		{"/packages/ab/cd/ef/requests-2.31.0-py3-none-any.whl.metadata", Package{"pypi", "requests", "2.31.0"}, true},
		{"/pypi/requests/json", Package{"pypi", "requests", ""}, true},
		{"/golang.test/x/text/@v/v0.3.0.zip", Package{"go", "golang.test/x/text", "v0.3.0"}, true},
		{"/golang.test/x/text/@v/v0.3.0.mod", Package{"go", "golang.test/x/text", "v0.3.0"}, true},
		{"/golang.test/x/text/@v/v0.3.0.info", Package{"go", "golang.test/x/text", "v0.3.0"}, true},
		{"/golang.test/x/text/@v/list", Package{"go", "golang.test/x/text", ""}, true},
		{"/example.test/!azure/sdk/@v/v1.0.0.zip", Package{"go", "example.test/Azure/sdk", "v1.0.0"}, true},
		{"/example.test/mod/@latest", Package{"go", "example.test/mod", ""}, true},
		{"/debian/pool/main/c/curl/curl_7.88.1-10_amd64.deb", Package{"debian", "curl", "7.88.1-10"}, true},
		{"/debian/pool/main/s/systemd/systemd_252%3a1-1_amd64.deb", Package{"debian", "systemd", "252:1-1"}, true},
		{"/debian/pool/main/c/curl/curl_7.88.1-10.dsc", Package{"debian", "curl", "7.88.1-10"}, true},
		{"/api/v1/crates/serde/1.0.0/download", Package{"crates", "serde", "1.0.0"}, true},
		{"/crates/serde/serde-1.0.0.crate", Package{"crates", "serde", "1.0.0"}, true},
		{"/se/rd/serde", Package{"crates", "serde", ""}, true},
		{"/3/l/log", Package{"crates", "log", ""}, true},
		{"/2/cc", Package{"crates", "cc", ""}, true},
		{"/1/a", Package{"crates", "a", ""}, true},
		{"/index/se/rd/serde", Package{"crates", "serde", ""}, true},
		{"/xx/rd/serde", Package{}, false},
		{"/", Package{}, false},
		{"", Package{}, false},
	}
	for _, tc := range cases {
		got, ok := RecognizePackage("reg.test", tc.path)
		if ok != tc.ok || got != tc.want {
			t.Errorf("RecognizePackage(%q) = %+v, %v; want %+v, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

func TestVersionConstraint(t *testing.T) {
	cases := []struct {
		pattern, version string
		want             bool
	}{
		{"pypi:requests<2.0", "1.9.9", true},
		{"pypi:requests<2.0", "2.0", false},
		{"pypi:requests<2.0", "2.0.0", false},
		{"pypi:requests<2.0", "10.0", false},
		{"pypi:requests<2.0", "2.0rc1", true},
		{"pypi:requests<=2.0", "2.0.0", true},
		{"pypi:requests>=2.0", "2.31.0", true},
		{"pypi:requests==2.0", "2.0.0", true},
		{"pypi:requests!=2.0", "2.0.1", true},
		{"pypi:requests>2.0", "", false},
	}
	for _, tc := range cases {
		pp, err := parsePkgPattern(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := pp.match(&Package{Ecosystem: "pypi", Name: "Requests", Version: tc.version}); got != tc.want {
			t.Errorf("%s matches %q = %v, want %v", tc.pattern, tc.version, got, tc.want)
		}
	}
}

func TestInternalAPIAndWebhooks(t *testing.T) {
	p := mustParse(t, `
version = 1
[categories.internal_api]
hosts = ["api.test"]
routes = [
  { methods = ["GET"], path = "/v1/items/*" },
  { methods = ["POST", "PUT"], path = "/v1/items/*/notes/**" },
]
inject = { header = "Authorization", secret = "api-token", format = "Bearer {}" }

[categories.webhooks]
hosts = ["hooks.test"]
paths = ["/services/T1/B2"]
max_body = "64KiB"
rate = "10/min"
`)
	checkDecisions(t, p, []decideCase{
		{"GET https://api.test/v1/items/42", ActionAllow, "categories.internal_api.routes[0]"},
		{"GET https://api.test/v1/items/42/", ActionDeny, "categories.internal_api.routes"},
		{"GET https://api.test/v1/items/../admin", ActionDeny, "categories.internal_api.routes"},
		{"GET https://api.test/v1/items/42%2F..%2F..%2Fadmin", ActionDeny, "categories.internal_api.routes"},
		{"GET https://api.test/v1/%69tems/42", ActionAllow, "categories.internal_api.routes[0]"},
		{"DELETE https://api.test/v1/items/42", ActionDeny, "categories.internal_api.routes"},
		{"POST https://api.test/v1/items/42/notes", ActionAllow, "categories.internal_api.routes[1]"},
		{"PUT https://api.test/v1/items/42/notes/a/b", ActionAllow, "categories.internal_api.routes[1]"},
		{"POST https://hooks.test/services/T1/B2", ActionAllow, "categories.webhooks.paths[0]"},
		{"POST https://hooks.test/services/T1/B3", ActionDeny, "categories.webhooks.paths"},
		{"GET https://hooks.test/services/T1/B2", ActionDeny, "categories.webhooks.methods"},
		{"POST http://hooks.test/services/T1/B2", ActionDeny, "categories.webhooks.http"},
	})
	api, _ := p.Category("internal_api")
	if api.Inject == nil || api.Inject.Value("s3cret") != "Bearer s3cret" || api.Inject.Secret != "api-token" {
		t.Errorf("inject = %+v", api.Inject)
	}
	hooks, _ := p.Category("webhooks")
	if hooks.MaxBody != 64<<10 || hooks.Rate.N != 10 || hooks.Rate.Per != 60e9 {
		t.Errorf("webhooks: max_body %d, rate %+v", hooks.MaxBody, hooks.Rate)
	}
}

func TestConnectAndAddresses(t *testing.T) {
	p := mustParse(t, `
version = 1
[categories.public_web]
hosts = ["web.test"]
http = true
[categories.internal_api]
hosts = ["api.corp.test"]
cidrs = ["10.20.0.0/16"]
ports = [443, "8443-8444"]
routes = [{ methods = ["GET"], path = "/**" }]
`)
	checkDecisions(t, p, []decideCase{
		{"connect web.test:443", ActionAllow, "categories.public_web.hosts[0]"},
		{"connect web.test:80", ActionAllow, "categories.public_web.hosts[0]"},
		{"connect web.test:8080", ActionDeny, "categories.public_web.ports"},
		{"connect web.test:443 ip=203.0.114.5", ActionAllow, ""},
		{"connect web.test:443 ip=127.0.0.1", ActionDeny, "categories.public_web.cidrs"},
		{"connect web.test:443 ip=169.254.169.254", ActionDeny, "categories.public_web.cidrs"},
		{"connect web.test:443 ip=::ffff:10.0.0.1", ActionDeny, "categories.public_web.cidrs"},
		{"connect web.test:443 ip=64:ff9b::a00:1", ActionDeny, "categories.public_web.cidrs"},
		{"connect api.corp.test:8443 ip=10.20.1.1", ActionAllow, "categories.internal_api.hosts[0]"},
		{"connect api.corp.test:443 ip=10.21.1.1", ActionDeny, "categories.internal_api.cidrs"},
		{"connect 10.20.3.4:443", ActionAllow, "categories.internal_api.cidrs[0]"},
		{"connect 10.30.3.4:443", ActionDeny, "default"},
		{"connect [::1]:443", ActionDeny, "default"},
		{"connect web.test:443 sni=other.test", ActionDeny, "default"},
		{"connect 203.0.114.5:443 sni=web.test", ActionAllow, "categories.public_web.hosts[0]"},
		{"connect 127.1:443", ActionDeny, "default"},
		{"GET http://web.test/", ActionAllow, ""},
		{"GET https://web.test/%zz", ActionDeny, "default"},
	})
	reach := func(a string, cat *Category) bool {
		return p.Reach(netip.MustParseAddr(a), Verdict{Cat: cat}).Allowed()
	}
	if !reach("203.0.114.5", nil) {
		t.Error("public address not allowed")
	}
	api, _ := p.Category("internal_api")
	if reach("10.20.0.1", nil) || !reach("10.20.0.1", api) {
		t.Error("private address: allowed only with the category naming it")
	}
	if reach("169.254.169.254", api) {
		t.Error("metadata address allowed")
	}
}

func TestDNS(t *testing.T) {
	p := mustParse(t, `
version = 1
[dns]
max_label = 20
[categories.public_web]
hosts = ["*.web.test"]
[categories.mail]
kind = "public_web"
hosts = ["mail.test"]
dns_types = ["TXT"]
`)
	checkDecisions(t, p, []decideCase{
		{"dns a.web.test", ActionAllow, "categories.public_web.hosts[0]"},
		{"dns A.Web.Test.", ActionAllow, ""},
		{"dns web.test", ActionDeny, "default"},
		{"dns a.web.test AAAA", ActionAllow, ""},
		{"dns a.web.test TXT", ActionDeny, "dns.qtypes"},
		{"dns mail.test TXT", ActionAllow, "categories.mail.hosts[0]"},
		{"dns mail.test ANY", ActionDeny, "dns.qtypes"},
		{"dns aaaaaaaaaaaaaaaaaaaaaaaaa.web.test", ActionDeny, "dns.max_label"},
	})
	d := p.DNS()
	if d.MaxName != 253 || d.MaxLabel != 20 || len(d.QTypes) == 0 || d.Block != BlockNXDomain || d.QueriesPerSecond != 0 {
		t.Errorf("DNS() = %+v", d)
	}
}

// The default query types leave out ANY and NULL; a policy that lists them
// allows them, and the rate caps come through DNS().
func TestDNSQTypesAndRates(t *testing.T) {
	p := mustParse(t, `
version = 1
[dns]
qtypes = ["A", "ANY", "NULL"]
queries_per_minute = 600
queries_per_second = 20
[categories.public_web]
hosts = ["*.web.test"]
`)
	checkDecisions(t, p, []decideCase{
		{"dns a.web.test ANY", ActionAllow, "categories.public_web.hosts[0]"},
		{"dns a.web.test NULL", ActionAllow, "categories.public_web.hosts[0]"},
		{"dns a.web.test AAAA", ActionDeny, "dns.qtypes"},
	})
	if d := p.DNS(); d.QueriesPerSecond != 20 || d.QueriesPerMinute != 600 {
		t.Errorf("DNS() = %+v", d)
	}
	def := mustParse(t, "version = 1\n[categories.public_web]\nhosts = [\"*.web.test\"]\n")
	checkDecisions(t, def, []decideCase{
		{"dns a.web.test ANY", ActionDeny, "dns.qtypes"},
		{"dns a.web.test NULL", ActionDeny, "dns.qtypes"},
		{"dns a.web.test TYPE252", ActionDeny, "dns.qtypes"},
	})
}

func TestUnknownStageFailsClosed(t *testing.T) {
	p := mustParse(t, "version = 1\n[categories.public_web]\nhosts = [\"a.test\"]\n")
	for _, r := range []Request{{}, {Stage: 99, Host: "a.test"}} {
		if v := p.Decide(r); v.Action != ActionDeny || v.WouldDeny {
			t.Errorf("Decide(%+v) = %+v", r, v)
		}
	}
	var nilPolicy *Policy
	if v := nilPolicy.Decide(Request{Stage: StageDNS, Host: "a.test"}); v.Action != ActionDeny {
		t.Errorf("nil policy: %v", v.Action)
	}
}

func TestExplain(t *testing.T) {
	p := mustParse(t, precedencePolicy)
	ex := p.Explain(mustReq(t, "GET https://docs.corp.test/"))
	if ex.Verdict.Rule.Name != "categories.docs.hosts[0]" {
		t.Fatalf("verdict rule %s", ex.Verdict.Rule.Name)
	}
	outcomes := map[string]string{}
	for _, c := range ex.Considered {
		outcomes[c.Rule.Name] = c.Outcome
	}
	for name, want := range map[string]string{
		"categories.docs.hosts[0]":       "the most specific rule that matches — decided",
		"categories.public_web.hosts[0]": "*.corp.test matches, but a more specific pattern decided",
		"categories.broad_deny":          "no host pattern matches docs.corp.test",
	} {
		if outcomes[name] != want {
			t.Errorf("considered %s: %q, want %q\nall: %v", name, outcomes[name], want, ex.Considered)
		}
	}
}

func TestAccessors(t *testing.T) {
	p, err := Load("examples/coding-agent.toml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "coding-agent" || len(p.Hash()) != 64 || p.Mode() != ModeEnforce {
		t.Errorf("Name %q Hash %q Mode %v", p.Name(), p.Hash(), p.Mode())
	}
	cats := p.Categories()
	for i := 1; i < len(cats); i++ {
		if cats[i-1].Name >= cats[i].Name {
			t.Errorf("categories not sorted: %s, %s", cats[i-1].Name, cats[i].Name)
		}
	}
	git, ok := p.Category("git")
	if !ok || git.Kind != KindGit || !git.Inspect || git.Pos.Line == 0 || len(git.Ports) != 1 || git.Ports[0] != (PortRange{443, 443}) {
		t.Errorf("git category: %+v", git)
	}
}

func TestSpliceCategory(t *testing.T) {
	p := mustParse(t, `
version = 1
[categories.media]
kind = "public_web"
hosts = ["media.test"]
inspect = false
action = "ask"
`)
	checkDecisions(t, p, []decideCase{
		{"connect media.test:443", ActionAsk, "categories.media.hosts[0]"},
		{"connect media.test:8443", ActionDeny, "categories.media.ports"},
	})
	c, _ := p.Category("media")
	if c.Inspect || len(c.Methods) != 1 || c.Methods[0] != "*" {
		t.Errorf("splice category: inspect %v methods %v", c.Inspect, c.Methods)
	}
}

func TestExplainRoutes(t *testing.T) {
	p := mustParse(t, `
version = 1
[categories.internal_api]
hosts = ["api.test"]
routes = [
  { methods = ["GET"], path = "/a" },
  { methods = ["GET"], path = "/b/*" },
]
`)
	ex := p.Explain(mustReq(t, "GET https://api.test/b/1"))
	var got []string
	for _, c := range ex.Considered {
		got = append(got, c.Rule.Name+": "+c.Outcome)
	}
	want := []string{
		"categories.internal_api.hosts[0]: the most specific rule that matches",
		"categories.internal_api.routes[0]: the method or the path does not match",
		"categories.internal_api.routes[1]: the first route that matches the method and path — decided",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("considered:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
