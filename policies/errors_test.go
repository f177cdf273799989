package policies

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFiveMistakesFiveErrors(t *testing.T) {
	_, err := Load("testdata/five-mistakes.toml")
	var el ErrorList
	if !errors.As(err, &el) {
		t.Fatalf("Load: want an ErrorList, got %v", err)
	}
	var got []string
	for _, e := range el {
		got = append(got, e.Pos.String()+" "+e.Path)
	}
	want := []string{
		"testdata/five-mistakes.toml:6:52 categories.git.hosts[2]",
		"testdata/five-mistakes.toml:7:1 categories.git.push",
		"testdata/five-mistakes.toml:10:10 categories.registries.hosts[0]",
		"testdata/five-mistakes.toml:11:10 categories.registries.cidrs[0]",
		"testdata/five-mistakes.toml:12:1 categories.registries.methds",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("errors (-want +got):\n%s\nfull:\n%v", diff, err)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 5 {
		t.Errorf("Error() has %d lines, want 5:\n%s", len(lines), err)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "testdata/five-mistakes.toml:") {
			t.Errorf("line %q does not start with file:line:col", l)
		}
	}
}

// TestErrors: one mistake per case, with the position and message expected.
func TestErrors(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"no version", "mode = \"audit\"\n", "x.toml:1:1: version: required"},
		{"wrong version", "version = 2\n", "x.toml:1:1: version: unsupported version 2"},
		{"syntax", "version = 1\nmode = \n", "x.toml:2:8: TOML syntax"},
		{"unknown top key", "version = 1\nmodes = \"audit\"\n", "x.toml:2:1: modes: unknown key (did you mean \"mode\"?)"},
		{"bad mode", "version = 1\nmode = \"lax\"\n", "x.toml:2:1: mode: unknown mode \"lax\""},
		{"unknown kind", "version = 1\n[categories.x]\nkind = \"ftp\"\nhosts = [\"a.test\"]\n", "x.toml:3:1: categories.x.kind: unknown kind \"ftp\""},
		{"kind required", "version = 1\n[categories.x]\nhosts = [\"a.test\"]\n", "x.toml:2:1: categories.x: kind: required"},
		{"empty label", "version = 1\n[categories.git]\nhosts = [\"a..test\"]\n", "x.toml:3:10: categories.git.hosts[0]: \"a..test\": empty label"},
		{"two trailing dots", "version = 1\n[categories.git]\nhosts = [\"ok.test\", \"a.test..\"]\n", "x.toml:3:21: categories.git.hosts[1]: \"a.test..\": empty label"},
		{"trailing dot repeats", "version = 1\n[categories.git]\nhosts = [\"a.test\", \"A.Test.\"]\n", "x.toml:3:20: categories.git.hosts[1]: \"a.test\" repeats categories.git.hosts[0]"},
		{"bare star", "version = 1\n[categories.git]\nhosts = [\"*\"]\n", "categories.git.hosts[0]: \"*\": a pattern needs a name"},
		{"middle wildcard", "version = 1\n[categories.git]\nhosts = [\"a.*.test\"]\n", "wildcard is only allowed as a leading"},
		{"suffix wildcard", "version = 1\n[categories.git]\nhosts = [\"*test\"]\n", "wildcard is only allowed as a leading"},
		{"ip pattern", "version = 1\n[categories.git]\nhosts = [\"198.18.0.1\"]\n", "host pattern is an IP address"},
		{"short ip pattern", "version = 1\n[categories.git]\nhosts = [\"127.1\"]\n", "host pattern looks like an IP address"},
		{"ipv6 pattern", "version = 1\n[categories.git]\nhosts = [\"[::1]\"]\n", "host pattern is an IP address"},
		{"name cidr", "version = 1\n[categories.git]\ncidrs = [\"git.test/32\"]\n", "cidrs take addresses, not names"},
		{"host bits", "version = 1\n[categories.git]\ncidrs = [\"198.18.0.1/15\"]\n", "prefix has host bits set; write 198.18.0.0/15"},
		{"bad port", "version = 1\n[categories.git]\nhosts = [\"g.test\"]\nports = [0]\n", "x.toml:4:10: categories.git.ports[0]: port 0 is out of range"},
		{"backwards range", "version = 1\n[categories.git]\nhosts = [\"g.test\"]\nports = [\"90-80\"]\n", "range is backwards"},
		{"lower method", "version = 1\n[categories.git]\nhosts = [\"g.test\"]\nmethods = [\"get\"]\n", "x.toml:4:12: categories.git.methods[0]: \"get\": methods are case-sensitive"},
		{"push on registries", "version = 1\n[categories.registries]\nhosts = [\"r.test\"]\npush = true\n", "categories.registries.push: push only applies to git categories"},
		{"internal_api needs routes", "version = 1\n[categories.internal_api]\nhosts = [\"api.test\"]\n", "categories.internal_api.routes: required"},
		{"route path", "version = 1\n[categories.internal_api]\nhosts = [\"api.test\"]\nroutes = [{ methods = [\"GET\"], path = \"/a/../b\" }]\n", "x.toml:4:32: categories.internal_api.routes[0].path: \"/a/../b\": path pattern is not in normal form; write /b"},
		{"route star", "version = 1\n[categories.internal_api]\nhosts = [\"api.test\"]\nroutes = [{ methods = [\"GET\"], path = \"/a/b*\" }]\n", "\"*\" must be a whole segment"},
		{"route unknown key", "version = 1\n[categories.internal_api]\nhosts = [\"api.test\"]\nroutes = [{ method = [\"GET\"], path = \"/a\" }]\n", "categories.internal_api.routes[0].method: unknown key (did you mean \"methods\"?)"},
		{"webhook paths", "version = 1\n[categories.webhooks]\nhosts = [\"h.test\"]\n", "categories.webhooks.paths: required"},
		{"rate", "version = 1\n[categories.webhooks]\nhosts = [\"h.test\"]\npaths = [\"/h\"]\nrate = \"10/fortnight\"\n", "x.toml:5:1: categories.webhooks.rate: \"10/fortnight\": unknown unit"},
		{"max_body", "version = 1\n[categories.webhooks]\nhosts = [\"h.test\"]\npaths = [\"/h\"]\nmax_body = \"lots\"\n", "categories.webhooks.max_body: size \"lots\""},
		{"inject format", "version = 1\n[categories.git]\nhosts = [\"g.test\"]\ninject = { header = \"Authorization\", secret = \"t\", format = \"Bearer\" }\n", "x.toml:4:52: categories.git.inject.format: \"Bearer\" has no \"{}\""},
		{"inject header", "version = 1\n[categories.git]\nhosts = [\"g.test\"]\ninject = { secret = \"t\" }\n", "categories.git.inject.header: required"},
		{"package ecosystem", "version = 1\n[categories.registries]\nhosts = [\"r.test\"]\npackages = { deny = [\"cpan:Foo\"] }\n", "x.toml:4:22: categories.registries.packages.deny[0]: \"cpan:Foo\": want ECOSYSTEM:NAME"},
		{"package op", "version = 1\n[categories.registries]\nhosts = [\"r.test\"]\npackages = { deny = [\"pypi:requests=<\"] }\n", "version constraint"},
		{"splice git push", "version = 1\n[categories.git]\nhosts = [\"g.test\"]\ninspect = false\n", "x.toml:4:1: categories.git.inspect: inspect = false decides on the TLS server name alone and cannot enforce: push = false"},
		{"dns block", "version = 1\n[dns]\nblock = \"drop\"\n", "x.toml:3:1: dns.block: unknown answer \"drop\""},
		{"dns upstream", "version = 1\n[dns]\nupstreams = [\"resolver.test:53\"]\n", "x.toml:3:14: dns.upstreams[0]"},
		{"dns qtype", "version = 1\n[dns]\nqtypes = [\"A\", \"BOGUS\"]\n", "x.toml:3:16: dns.qtypes[1]: unknown DNS query type \"BOGUS\""},
		{"dns qtype axfr", "version = 1\n[dns]\nqtypes = [\"A\", \"TYPE252\"]\n", "x.toml:3:16: dns.qtypes[1]: \"TYPE252\" is AXFR, a zone transfer"},
		{"dns qtype opt", "version = 1\n[dns]\nqtypes = [\"TYPE41\"]\n", "dns.qtypes[0]: \"TYPE41\" is OPT"},
		{"dns queries_per_second", "version = 1\n[dns]\nqueries_per_second = -1\n", "x.toml:3:1: dns.queries_per_second: -1 is out of range"},
		{"dns queries_per_second type", "version = 1\n[dns]\nqueries_per_second = \"10\"\n", "x.toml:3:1: dns.queries_per_second: want an integer, got a string"},
		{"dns queries_per_second above minute", "version = 1\n[dns]\nqueries_per_minute = 60\nqueries_per_second = 100\n", "x.toml:4:1: dns.queries_per_second: 100 is above queries_per_minute (60)"},
		{"dns max_label", "version = 1\n[dns]\nmax_label = 64\n", "dns.max_label: 64 is out of range"},
		{"deny host", "version = 1\n[deny]\nhosts = [\"*.*.test\"]\n", "deny.hosts[0]"},
		{"duplicate host", "version = 1\n[categories.git]\nhosts = [\"g.test\", \"G.test\"]\n", "x.toml:3:20: categories.git.hosts[1]: \"g.test\" repeats categories.git.hosts[0]"},
		{"test expect", "version = 1\n[[tests]]\nrequest = \"dns a.test\"\nexpect = \"allowed\"\n", "x.toml:4:1: tests[0].expect: unknown verdict \"allowed\""},
		{"test request", "version = 1\n[[tests]]\nrequest = \"FETCH a.test\"\nexpect = \"deny\"\n", "x.toml:3:1: tests[0].request"},
		{"second test", "version = 1\n[[tests]]\nrequest = \"dns a.test\"\nexpect = \"deny\"\n[[tests]]\nrequest = \"dns a.test\"\nexpekt = \"deny\"\n", "x.toml:7:1: tests[1].expekt: unknown key"},
		{"type mismatch", "version = 1\n[categories.git]\nhosts = \"g.test\"\n", "x.toml:3:1: categories.git.hosts: want an array, got a string"},
		{"array of tables route", "version = 1\n[categories.internal_api]\nhosts = [\"api.test\"]\n[[categories.internal_api.routes]]\nmethods = [\"GET\"]\npath = \"/a\"\n[[categories.internal_api.routes]]\nmethods = [\"get\"]\npath = \"/b\"\n", "x.toml:8:12: categories.internal_api.routes[1].methods[0]"},
		{"dotted inject key", "version = 1\n[categories.git]\nhosts = [\"g.test\"]\ninject.header = \"A\"\ninject.secret = \"s\"\ninject.format = \"x\"\n", "x.toml:6:1: categories.git.inject.format"},
		{"empty hosts", "version = 1\n[categories.git]\nhosts = []\n", "x.toml:2:1: categories.git: hosts and cidrs are empty"},
		{"quoted category", "version = 1\n[categories.\"my.cat\"]\nkind = \"git\"\nhosts = [\"a..b\"]\n", "x.toml:4:10: categories.\"my.cat\".hosts[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x.toml", []byte(tc.src))
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", tc.src)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error:\n%v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

func TestAllErrorsAtOnce(t *testing.T) {
	src := "version = 1\nbogus = 1\n[categories.git]\nhosts = [\"a..b\", \"*.ok.test\", \"x.*.y\"]\nports = [70000]\n[dns]\nmax_name = 0\n"
	_, err := Parse("x.toml", []byte(src))
	var el ErrorList
	if !errors.As(err, &el) || len(el) != 5 {
		t.Fatalf("want 5 errors, got %v", err)
	}
	for i := 1; i < len(el); i++ {
		if el[i].Pos.Line < el[i-1].Pos.Line {
			t.Errorf("errors are not in file order:\n%v", err)
		}
	}
}

// TestTOMLSyntaxPositions: a syntax error points at the line the mistake
// is on, not the line the parser had reached (users.md S9).
func TestTOMLSyntaxPositions(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"unclosed table header", "version = 1\n[categories.git\nhosts = [\"gitea.acme.test\"]\n",
			"m.toml:2:16: TOML syntax: expected '.' or ']' to end table name, but got '\\n' instead"},
		{"unclosed array", "version = 1\n[categories.git]\nhosts = [\"gitea.acme.test\"\npush = true\n",
			"m.toml:3:27: TOML syntax: expected a comma (',') or array terminator (']'), but got 'p' on line 4"},
		{"unclosed array over blank lines", "version = 1\nx = [1,\n\n  \n",
			"m.toml:2:8: TOML syntax: unexpected EOF; expected value"},
		{"missing value", "version = 1\nmode = \n", "m.toml:2:8: TOML syntax: expected value but found '\\n' instead"},
		{"two values", "version = 1\nx = 1 2\n", "m.toml:2:6: TOML syntax: expected a top-level item to end"},
		{"first byte", "[", "m.toml:1:2: TOML syntax: unexpected end of table name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("m.toml", []byte(tc.src))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("got  %v\nwant %s...", err, tc.want)
			}
		})
	}
}

// TestWireDecoding: the loader reads keys by their exact names and reports
// every value of the wrong type at once, each at its place.
func TestWireDecoding(t *testing.T) {
	src := "version = 1\nmode = 1\n[dns]\nmax_label = \"x\"\n[categories.git]\nHosts = [\"g.test\"]\nhosts = [\"a.test\", 3]\npush = \"yes\"\ninject = \"x\"\n" +
		"[categories.registries]\nhosts = [\"r.test\"]\nrepos = [\"a/b\"]\npackages = { allow = [1], deni = [] }\n"
	_, err := Parse("x.toml", []byte(src))
	want := []string{
		"x.toml:2:1: mode: want a string, got an integer",
		"x.toml:4:1: dns.max_label: want an integer, got a string",
		"x.toml:6:1: categories.git.Hosts: unknown key (did you mean \"hosts\"?)",
		"x.toml:7:20: categories.git.hosts[1]: want a string, got an integer",
		"x.toml:8:1: categories.git.push: want true or false, got a string",
		"x.toml:9:1: categories.git.inject: want a table, got a string",
		"x.toml:12:1: categories.registries.repos: repos only applies to git categories (this one is registries)",
		"x.toml:13:23: categories.registries.packages.allow[0]: want a string, got an integer",
		"x.toml:13:27: categories.registries.packages.deni: unknown key (did you mean \"deny\"?)",
	}
	if err == nil {
		t.Fatal("Parse accepted it")
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
}
