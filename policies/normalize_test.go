package policies

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestNormalizeHost(t *testing.T) {
	cases := []struct {
		in, want string
		bad      bool
	}{
		{in: "Example.TEST", want: "example.test"},
		{in: "example.test.", want: "example.test"},
		{in: "_dmarc.example.test", want: "_dmarc.example.test"},
		{in: "bücher.example.test", want: "xn--bcher-kva.example.test"},
		{in: "BÜCHER.example.test.", want: "xn--bcher-kva.example.test"},
		{in: "xn--bcher-kva.example.test", want: "xn--bcher-kva.example.test"},
		{in: "198.18.0.1", want: "198.18.0.1"},
		{in: "[2001:db8::1]", want: "2001:db8::1"},
		{in: "2001:db8::1", want: "2001:db8::1"},
		{in: "", bad: true},
		{in: ".", bad: true},
		{in: "a..test", bad: true},
		{in: ".a.test", bad: true},
		{in: "a.test..", bad: true},
		{in: "-a.test", bad: true},
		{in: "a-.test", bad: true},
		{in: "a b.test", bad: true},
		{in: "a/b.test", bad: true},
		{in: "*.a.test", bad: true},
		{in: "127.1", bad: true},
		{in: "0x7f.0.0.1", bad: true},
		{in: "0x7f000001", bad: true},
		{in: "2130706433", bad: true},
		{in: "010.0.0.1", bad: true},
		{in: "1.2.3.4.", bad: true},
		{in: "[2001:DB8::1]", bad: true},
		{in: "[2001:db8:0::1]", bad: true},
		{in: "[fe80::1%eth0]", bad: true},
		{in: "[::ffff:1.2.3.4", bad: true},
		{in: "a.test\x00", bad: true},
		{in: "a.test%2e", bad: true},
		{in: string(make([]byte, 300)), bad: true},
	}
	for _, tc := range cases {
		got, err := NormalizeHost(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("NormalizeHost(%q) = %q, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("NormalizeHost(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestNormalizePath(t *testing.T) {
	cases := []struct {
		in, want string
		bad      bool
	}{
		{in: "", want: "/"},
		{in: "/", want: "/"},
		{in: "/a/b", want: "/a/b"},
		{in: "/a//b", want: "/a/b"},
		{in: "//a///b//", want: "/a/b/"},
		{in: "/a/./b", want: "/a/b"},
		{in: "/a/../b", want: "/b"},
		{in: "/../../b", want: "/b"},
		{in: "/a/b/..", bad: true},
		{in: "/a/b/%2e%2E", bad: true},
		{in: "/a/b/..;x", bad: true},
		{in: "/a/%252e%252e/b", bad: true},
		{in: "/a/%2525", bad: true},
		{in: "/100%25", want: "/100%25"},
		{in: "/a%00b", bad: true},
		{in: "/a/%C0%AE%C0%AE/b", bad: true},
		{in: "/a/%E0%80%AE/b", bad: true},
		{in: "/a/\xc0\xae/b", bad: true},
		{in: "/a/%EF%BC%8E%EF%BC%8E/b", bad: true},
		{in: "/a/\uff0e\uff0e/b", bad: true},
		{in: "/a\uff0fb", bad: true},
		{in: "/a/%E2%80%A4", bad: true},
		{in: "/caf%C3%A9", want: "/caf%C3%A9"},
		{in: "/a/b/.", want: "/a/b/"},
		{in: "/a/%2e%2e/b", want: "/b"},
		{in: "/a/%2E/b", want: "/a/b"},
		{in: "/a/..;/b", want: "/b"},
		{in: "/%61%62c", want: "/abc"},
		{in: "/%7euser", want: "/~user"},
		{in: "/a%2fb", want: "/a%2Fb"},
		{in: "/a%2Fb/../c", want: "/c"},
		{in: "/a b", want: "/a%20b"},
		{in: "/é", want: "/%C3%A9"},
		{in: "/@scope%2fname", want: "/@scope%2Fname"},
		{in: "a/b", bad: true},
		{in: "/a%zz", bad: true},
		{in: "/a%2", bad: true},
	}
	for _, tc := range cases {
		got, err := NormalizePath(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("NormalizePath(%q) = %q, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("NormalizePath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestPathPattern(t *testing.T) {
	cases := []struct {
		pattern, path string
		want          bool
	}{
		{"/v1/items/*", "/v1/items/42", true},
		{"/v1/items/*", "/v1/items/42/details", false},
		{"/v1/items/*", "/v1/items/", false},
		{"/v1/items/*", "/v1/items", false},
		{"/v1/items/*", "/v1/items/a%2Fb", false},
		{"/v1/items/**", "/v1/items", true},
		{"/v1/items/**", "/v1/items/a/b/c", true},
		{"/v1/items/**", "/v1/itemsx", false},
		{"/v1/items", "/v1/items", true},
		{"/v1/items", "/v1/items/", false},
		{"/v1/items/", "/v1/items/", true},
		{"/v1/*/status", "/v1/x/status", true},
		{"/v1/*/status", "/v1/x/y/status", false},
		{"/", "/", true},
		{"/", "/a", false},
		{"/**", "/anything/at/all", true},
	}
	for _, tc := range cases {
		pp, err := parsePathPattern(tc.pattern)
		if err != nil {
			t.Fatalf("parsePathPattern(%q): %v", tc.pattern, err)
		}
		if got := pp.match(tc.path); got != tc.want {
			t.Errorf("%q matches %q = %v, want %v", tc.pattern, tc.path, got, tc.want)
		}
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		name, addr string
		want       AddrClass
	}{
		{"public v4", "8.8.4.4", ClassPublic},
		{"public v4 near private", "172.32.0.1", ClassPublic},
		{"public v4 below cgnat", "100.63.255.255", ClassPublic},
		{"public v6", "2606:4700::1", ClassPublic},
		{"loopback v4", "127.0.0.1", ClassLoopback},
		{"loopback v4 range", "127.255.0.9", ClassLoopback},
		{"loopback v6", "::1", ClassLoopback},
		{"rfc1918 10", "10.1.2.3", ClassPrivate},
		{"rfc1918 172.16", "172.16.0.1", ClassPrivate},
		{"rfc1918 172.31", "172.31.255.255", ClassPrivate},
		{"rfc1918 192.168", "192.168.1.1", ClassPrivate},
		{"ula", "fd00:ec2::254", ClassPrivate},
		{"ula fc", "fc00::1", ClassPrivate},
		{"site-local", "fec0::1", ClassPrivate},
		{"link-local v4", "169.254.1.1", ClassLinkLocal},
		{"metadata service", "169.254.169.254", ClassLinkLocal},
		{"link-local v6", "fe80::1", ClassLinkLocal},
		{"link-local v6 zone", "fe80::1%eth0", ClassLinkLocal},
		{"cgnat low", "100.64.0.1", ClassCGNAT},
		{"cgnat high", "100.127.255.254", ClassCGNAT},
		{"benchmarking", "198.18.0.1", ClassSpecial},
		{"benchmarking upper half", "198.19.255.255", ClassSpecial},
		{"test-net-1", "192.0.2.1", ClassSpecial},
		{"test-net-2", "198.51.100.7", ClassSpecial},
		{"test-net-3", "203.0.113.9", ClassSpecial},
		{"ietf protocol", "192.0.0.8", ClassSpecial},
		{"this network", "0.1.2.3", ClassSpecial},
		{"reserved 240/4", "240.0.0.1", ClassSpecial},
		{"broadcast", "255.255.255.255", ClassSpecial},
		{"documentation v6", "2001:db8::1", ClassSpecial},
		{"documentation v6 3fff", "3fff::1", ClassSpecial},
		{"discard v6", "100::1", ClassSpecial},
		{"multicast v4", "224.0.0.251", ClassMulticast},
		{"multicast v4 high", "239.255.255.250", ClassMulticast},
		{"multicast v6", "ff02::fb", ClassMulticast},
		{"unspecified v4", "0.0.0.0", ClassUnspecified},
		{"unspecified v6", "::", ClassUnspecified},
		{"mapped loopback", "::ffff:127.0.0.1", ClassLoopback},
		{"mapped metadata", "::ffff:169.254.169.254", ClassLinkLocal},
		{"mapped private", "::ffff:10.0.0.1", ClassPrivate},
		{"mapped public", "::ffff:8.8.8.8", ClassPublic},
		{"nat64 loopback", "64:ff9b::7f00:1", ClassLoopback},
		{"nat64 metadata", "64:ff9b::a9fe:a9fe", ClassLinkLocal},
		{"nat64 public", "64:ff9b::808:808", ClassEmbedded},
		{"local nat64 private", "64:ff9b:1::a00:1", ClassPrivate},
		{"6to4 private", "2002:c0a8:101::1", ClassPrivate},
		{"6to4 loopback", "2002:7f00:1::1", ClassLoopback},
		{"6to4 public", "2002:808:808::1", ClassEmbedded},
		{"teredo private client", "2001:0:4136:e378:8000:63bf:f5ff:fffe", ClassPrivate},
		{"teredo public client", "2001:0:4136:e378:8000:63bf:f7f7:f7f7", ClassEmbedded},
		{"ipv4-compatible", "::1.2.3.4", ClassSpecial},
		{"non-global v6", "4000::1", ClassSpecial},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Classify(netip.MustParseAddr(tc.addr))
			if got != tc.want {
				t.Errorf("Classify(%s) = %v, want %v", tc.addr, got, tc.want)
			}
			if got.Public() != (tc.want == ClassPublic) {
				t.Errorf("Public() = %v for %v", got.Public(), got)
			}
		})
	}
	if got := Classify(netip.Addr{}); got != ClassInvalid || got.Public() {
		t.Errorf("Classify(zero) = %v", got)
	}
}

func TestHostPattern(t *testing.T) {
	var h HostPattern
	if err := h.UnmarshalText([]byte("*.Example.TEST")); err != nil || h != "*.example.test" {
		t.Fatalf("UnmarshalText: %q %v", h, err)
	}
	for host, want := range map[string]bool{"a.example.test": true, "A.B.Example.Test.": true, "example.test": false, "xexample.test": false, "a.example.test.evil.test": false} {
		if got := h.Match(host); got != want {
			t.Errorf("%s.Match(%q) = %v, want %v", h, host, got, want)
		}
	}
	for _, bad := range []string{"*", "a.*.test", "198.18.0.1", "", "a..test"} {
		if err := h.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("UnmarshalText(%q) accepted", bad)
		}
	}
}

// TestLastSegsIsSplitsTail: the crates recognizer sees exactly the last
// three segments strings.Split would give, empty ones included.
func TestLastSegsIsSplitsTail(t *testing.T) {
	for _, s := range []string{"", "a", "a/b", "a/b/c", "a/b/c/d", "/", "//", "a//b", "/x/", "crates/serde/serde-1.0.0.crate", "x/3/l/log"} {
		all := strings.Split(s, "/")
		want := all[max(0, len(all)-3):]
		var out [3]string
		if got := lastSegs(s, &out); !slices.Equal(got, want) {
			t.Errorf("lastSegs(%q) = %q, want %q", s, got, want)
		}
	}
}

// TestRecognizeCratesDoesNotAllocate: the proxy asks on every request.
func TestRecognizeCratesDoesNotAllocate(t *testing.T) {
	for _, p := range []string{"/static/app/main.js", "/crates/serde/serde-1.0.0.crate", "/se/rd/serde"} {
		if n := testing.AllocsPerRun(100, func() { recognizeCrates(p) }); n != 0 {
			t.Errorf("recognizeCrates(%q): %v allocations, want 0", p, n)
		}
	}
}

// TestHostPatternTrailingDot: a policy's host pattern is normalized as a
// request's name is, one trailing dot removed (docs/policy.md, "Hosts";
// users.md S6: check used to say "empty label").
func TestHostPatternTrailingDot(t *testing.T) {
	p := mustParse(t, `version = 1
[categories.public_web]
hosts = ["Bücher.Example.Test.", "*.Pkg.Example.Test."]
`)
	if got := p.Categories()[0].Hosts; !slices.Equal(got, []string{"xn--bcher-kva.example.test", "*.pkg.example.test"}) {
		t.Errorf("hosts = %q", got)
	}
	checkDecisions(t, p, []decideCase{
		{"GET https://xn--bcher-kva.example.test/", ActionAllow, "categories.public_web.hosts[0]"},
		{"dns bücher.example.test.", ActionAllow, "categories.public_web.hosts[0]"},
		{"connect a.pkg.example.test.:443", ActionAllow, "categories.public_web.hosts[1]"},
		{"GET https://pkg.example.test/", ActionDeny, "default"},
	})
}
