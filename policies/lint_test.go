package policies

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// warnings parses src (which must load) and returns its warnings as
// "line:col: path: message".
func warnings(t *testing.T, src string) []string {
	t.Helper()
	p, err := Parse("w.toml", []byte(src))
	if err != nil {
		t.Fatalf("Parse:\n%v", err)
	}
	var out []string
	for _, w := range p.Warnings() {
		out = append(out, strings.TrimPrefix(w.Error(), "w.toml:"))
	}
	return out
}

func TestLintWarnings(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []string
	}{
		{"clean", `version = 1
[categories.public_web]
hosts = ["docs.example.test", "*.pkg.example.test"]
cidrs = ["198.18.0.0/15"]
ports = [443, 8443]
`, nil},
		{"wildcard above a public suffix", `version = 1
[categories.public_web]
hosts = ["*.com", "*.co.uk", "*.herokuapp.com", "*.example.co.uk", "*.test"]
`, []string{
			`3:10: categories.public_web.hosts[0]: "*.com" matches every name under the public suffix "com", names anyone can register: list the names the category needs`,
			`3:19: categories.public_web.hosts[1]: "*.co.uk" matches every name under the public suffix "co.uk", names anyone can register: list the names the category needs`,
			`3:30: categories.public_web.hosts[2]: "*.herokuapp.com" matches every name under the public suffix "herokuapp.com", names anyone can register: list the names the category needs`,
			`3:68: categories.public_web.hosts[4]: "*.test" matches every name under the public suffix "test", names anyone can register: list the names the category needs`,
		}},
		{"risky cidrs", `version = 1
[categories.public_web]
hosts = ["a.example.test"]
cidrs = ["0.0.0.0/0", "::/0", "169.254.169.254", "169.254.0.0/16", "127.0.0.1", "::ffff:0:0/96", "fe80::/10", "10.0.0.0/8", "::1"]
`, []string{
			`4:10: categories.public_web.cidrs[0]: 0.0.0.0/0 reaches the whole address space (every private, loopback, link-local and metadata address): a sandbox could reach the host or the metadata service; name narrower ranges, or set categories.public_web.cidrs_reach_host_and_metadata = true if that is the point`,
			`4:23: categories.public_web.cidrs[1]: ::/0 reaches the whole address space (every private, loopback, link-local and metadata address): a sandbox could reach the host or the metadata service; name narrower ranges, or set categories.public_web.cidrs_reach_host_and_metadata = true if that is the point`,
			`4:31: categories.public_web.cidrs[2]: 169.254.169.254/32 reaches the cloud metadata service, link-local addresses: a sandbox could reach the host or the metadata service; name narrower ranges, or set categories.public_web.cidrs_reach_host_and_metadata = true if that is the point`,
			`4:50: categories.public_web.cidrs[3]: 169.254.0.0/16 reaches the cloud metadata service, link-local addresses: a sandbox could reach the host or the metadata service; name narrower ranges, or set categories.public_web.cidrs_reach_host_and_metadata = true if that is the point`,
			`4:68: categories.public_web.cidrs[4]: 127.0.0.1/32 reaches loopback: a sandbox could reach the host or the metadata service; name narrower ranges, or set categories.public_web.cidrs_reach_host_and_metadata = true if that is the point`,
			`4:81: categories.public_web.cidrs[5]: ::ffff:0.0.0.0/96 reaches IPv4-mapped addresses: a sandbox could reach the host or the metadata service; name narrower ranges, or set categories.public_web.cidrs_reach_host_and_metadata = true if that is the point`,
			`4:98: categories.public_web.cidrs[6]: fe80::/10 reaches link-local addresses: a sandbox could reach the host or the metadata service; name narrower ranges, or set categories.public_web.cidrs_reach_host_and_metadata = true if that is the point`,
			`4:125: categories.public_web.cidrs[8]: ::1/128 reaches loopback: a sandbox could reach the host or the metadata service; name narrower ranges, or set categories.public_web.cidrs_reach_host_and_metadata = true if that is the point`,
		}},
		{"escape hatch set", `version = 1
[categories.public_web]
hosts = ["a.example.test"]
cidrs = ["169.254.169.254"]
cidrs_reach_host_and_metadata = true
[categories.other]
kind = "public_web"
hosts = ["b.example.test"]
cidrs = ["10.1.0.0/16"]
cidrs_reach_host_and_metadata = true
`, []string{
			`10:1: categories.other.cidrs_reach_host_and_metadata: set, but no cidr of categories.other needs it: remove it`,
		}},
		{"whole port range", `version = 1
[categories.public_web]
hosts = ["a.example.test"]
ports = ["1-1024", "1025-65535"]
[categories.other]
kind = "public_web"
hosts = ["b.example.test"]
ports = ["1-65535"]
[categories.fine]
kind = "public_web"
hosts = ["c.example.test"]
ports = ["2-65535"]
`, []string{
			`4:1: categories.public_web.ports: covers every port (1-65535): list the ports the category needs`,
			`8:1: categories.other.ports: covers every port (1-65535): list the ports the category needs`,
		}},
		{"duplicates", `version = 1
[dns]
qtypes = ["A", "AAAA", "a"]
[deny]
cidrs = ["198.18.9.0/24", "198.18.9.7"]
[categories.registries]
hosts = ["r.example.test"]
methods = ["GET", "HEAD", "GET"]
cidrs = ["198.18.0.0/16", "198.18.0.0/16"]
ports = [443, "440-450"]
packages = { deny = ["npm:evil", "npm:Evil"] }
[[tests]]
request = "GET https://r.example.test/"
expect = "allow"
[[tests]]
request = "GET https://r.example.test/"
expect = "allow"
`, []string{
			`3:24: dns.qtypes[2]: "a" repeats dns.qtypes[0]`,
			`5:27: deny.cidrs[1]: 198.18.9.7/32 is inside 198.18.9.0/24 (deny.cidrs[0]): remove one`,
			`8:27: categories.registries.methods[2]: "GET" repeats categories.registries.methods[0]`,
			`9:27: categories.registries.cidrs[1]: 198.18.0.0/16 repeats categories.registries.cidrs[0]`,
			`11:34: categories.registries.packages.deny[1]: "npm:Evil" repeats categories.registries.packages.deny[0]`,
			`16:1: tests[1].request: "GET https://r.example.test/" repeats tests[0]`,
		}},
		{"ports inside another", `version = 1
[categories.public_web]
hosts = ["a.example.test"]
ports = ["8000-8100", 8080]
`, []string{`4:23: categories.public_web.ports[1]: 8080 is inside categories.public_web.ports[0]`}},
		{"tie between categories that differ (users.md S7)", `version = 1
[categories.staging]
kind = "internal_api"
hosts = ["api.staging.example.test"]
routes = [{ methods = ["GET"], path = "/**" }, { methods = ["GET"], path = "/v2/secret" }]
[categories.registries]
hosts = ["api.staging.example.test"]
[categories.same]
kind = "public_web"
hosts = ["same.example.test"]
[categories.same_too]
kind = "public_web"
hosts = ["same.example.test"]
`, []string{
			`5:48: categories.staging.routes[1]: can never match: categories.staging.routes[0] comes first and matches every request this route would`,
			`7:10: categories.registries.hosts[0]: "api.staging.example.test" is also in categories.staging.hosts[0], and the two categories decide differently (kind, methods, routes): each request gets the more restrictive verdict of the two; list the host in one category`,
		}},
		{"the same cidr in two categories", `version = 1
[categories.a]
kind = "public_web"
cidrs = ["198.18.5.0/24"]
[categories.b]
kind = "public_web"
cidrs = ["198.18.5.0/24"]
methods = ["GET", "POST"]
`, []string{
			`7:10: categories.b.cidrs[0]: 198.18.5.0/24 is also in categories.a.cidrs[0], and the two categories decide differently (methods): a connection to a bare address in it is decided by categories.a alone`,
		}},
		{"routes that never match", `version = 1
[categories.api]
kind = "internal_api"
hosts = ["api.example.test"]
methods = ["GET", "POST"]
routes = [
  { methods = ["GET", "DELETE"], path = "/v1/items/*" },
  { methods = ["GET"], path = "/v1/items/7" },
  { methods = ["POST"], path = "/v1/items/7" },
  { methods = ["*"], path = "/v2/**" },
  { methods = ["GET"], path = "/v2" },
  { methods = ["GET"], path = "/v3/*/x" },
  { methods = ["GET"], path = "/v3/a/x" },
  { methods = ["GET"], path = "/v3/**" },
]
`, []string{
			`7:23: categories.api.routes[0].methods[1]: the route allows DELETE, which categories.api.methods never allows: it never matches a DELETE request`,
			`8:3: categories.api.routes[1]: can never match: categories.api.routes[0] comes first and matches every request this route would`,
			`11:3: categories.api.routes[4]: can never match: categories.api.routes[3] comes first and matches every request this route would`,
			`13:3: categories.api.routes[6]: can never match: categories.api.routes[5] comes first and matches every request this route would`,
		}},
		{"routes written as an array of tables", `version = 1
[categories.api]
kind = "internal_api"
hosts = ["api.example.test"]
[[categories.api.routes]]
methods = ["*"]
path = "/v1/**"
[[categories.api.routes]]
methods = ["GET"]
path = "/v1/items"
`, []string{
			`8:1: categories.api.routes[1]: can never match: categories.api.routes[0] comes first and matches every request this route would`,
		}},
		{"tests naming what does not exist", `version = 1
[categories.git]
hosts = ["git.example.test"]
[[tests]]
request = "POST https://git.example.test/a/b.git/git-receive-pack"
expect = "deny"
rule = "categories.git.push"
[[tests]]
request = "GET https://git.example.test/a/b.git/info/refs"
expect = "allow"
rule = "categories.git.host[0]"
category = "gti"
[[tests]]
request = "GET https://git.example.test/a/c.git/info/refs"
expect = "allow"
rule = "categories.git.hosts[1]"
`, []string{
			`11:1: tests[1].rule: no rule is named "categories.git.host[0]" (did you mean "categories.git.hosts[0]"?): the test can never pass`,
			`12:1: tests[1].category: no category is named "gti" (did you mean "git"?): the test can never pass`,
			`16:1: tests[2].rule: no rule is named "categories.git.hosts[1]" (did you mean "categories.git.hosts[0]"?): the test can never pass`,
		}},
		{"non-ASCII host names", "version = 1\n[deny]\nhosts = [\"p\u0430ypal.example.test\"]\n[categories.public_web]\nhosts = [\"b\u00fccher.example.test\", \"xn--caf-dma.example.test\"]\n", []string{
			`3:10: deny.hosts[0]: "pаypal.example.test" is not ASCII: write its A-label "xn--pypal-4ve.example.test", so look-alike letters cannot hide in it`,
			`5:10: categories.public_web.hosts[0]: "bücher.example.test" is not ASCII: write its A-label "xn--bcher-kva.example.test", so look-alike letters cannot hide in it`,
		}},
		{"bidi and invisible characters", "\ufeffversion = 1\n# admin\u202e \u2066x\u2069\n[categories.public_web]\nhosts = [\"a.example.test\u200b\"]\ndescription = \"zero\u2060width\"\n", []string{
			`2:8: U+202E RIGHT-TO-LEFT OVERRIDE: an invisible character can make the file read differently from how it is decided; remove it`,
			`2:12: U+2066 LEFT-TO-RIGHT ISOLATE: an invisible character can make the file read differently from how it is decided; remove it`,
			`2:16: U+2069 POP DIRECTIONAL ISOLATE: an invisible character can make the file read differently from how it is decided; remove it`,
			"4:10: categories.public_web.hosts[0]: \"a.example.test\\u200b\" is not ASCII: write its A-label \"a.example.test\", so look-alike letters cannot hide in it",
			`4:25: categories.public_web.hosts: U+200B ZERO WIDTH SPACE: an invisible character can make the file read differently from how it is decided; remove it`,
			`5:20: categories.public_web.description: U+2060 WORD JOINER: an invisible character can make the file read differently from how it is decided; remove it`,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, warnings(t, tc.src)); d != "" {
				t.Errorf("warnings (-want +got):\n%s", d)
			}
		})
	}
}

func TestLintHatchMustBeABoolean(t *testing.T) {
	_, err := Parse("w.toml", []byte("version = 1\n[categories.public_web]\nhosts = [\"a.example.test\"]\ncidrs_reach_host_and_metadata = \"yes\"\n"))
	want := "w.toml:4:1: categories.public_web.cidrs_reach_host_and_metadata: want true or false, got a string"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}
