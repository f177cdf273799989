package policies

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// bigPolicy is a policy with n host rules spread over 100 categories: half
// exact names, half wildcards.
func bigPolicy(n int) []byte {
	var b strings.Builder
	b.WriteString("version = 1\n\n[deny]\nhosts = [\"*.blocked.example.test\"]\n")
	per := n / 100
	for c := 0; c < 100; c++ {
		fmt.Fprintf(&b, "\n[categories.c%03d]\nkind = \"public_web\"\nhosts = [\n", c)
		for i := 0; i < per; i++ {
			if i%2 == 0 {
				fmt.Fprintf(&b, "  \"h%d.c%d.example.test\",\n", i, c)
			} else {
				fmt.Fprintf(&b, "  \"*.w%d.c%d.example.test\",\n", i, c)
			}
		}
		b.WriteString("]\n")
	}
	return []byte(b.String())
}

var (
	bigOnce sync.Once
	bigSrc  []byte
	bigPol  *Policy
	bigErr  error
)

func loadBig(b *testing.B) *Policy {
	bigOnce.Do(func() {
		bigSrc = bigPolicy(65_000) // the most MaxEntries lets in
		bigPol, bigErr = Parse("big.toml", bigSrc)
	})
	if bigErr != nil {
		b.Fatal(bigErr)
	}
	return bigPol
}

func benchDecide(b *testing.B, r Request, want Action) {
	p := loadBig(b)
	if v := p.Decide(r); v.Action != want {
		b.Fatalf("Decide(%+v) = %v (%s), want %v", r, v.Action, v.Reason, want)
	}
	b.ReportAllocs()
	b.ResetTimer()
	clock := startCPUClock(b, true)
	for b.Loop() {
		p.Decide(r)
	}
	clock.stop(b)
}

func BenchmarkDecideConnect65k(b *testing.B) {
	benchDecide(b, Request{Stage: StageConnect, Host: "h500.c42.example.test", Port: 443,
		IP: netip.MustParseAddr("203.0.114.7")}, ActionAllow)
}

func BenchmarkDecideConnectWildcard65k(b *testing.B) {
	benchDecide(b, Request{Stage: StageConnect, SNI: "a.b.w501.c42.example.test", Port: 443}, ActionAllow)
}

func BenchmarkDecideConnectMiss65k(b *testing.B) {
	benchDecide(b, Request{Stage: StageConnect, SNI: "x.y.z.nowhere.example.test", Port: 443}, ActionDeny)
}

func BenchmarkDecideConnectUpperCase65k(b *testing.B) {
	benchDecide(b, Request{Stage: StageConnect, Host: "H500.C42.Example.Test.", Port: 443}, ActionAllow)
}

func BenchmarkDecideDNS65k(b *testing.B) {
	benchDecide(b, Request{Stage: StageDNS, Host: "h500.c42.example.test.", QType: 1}, ActionAllow)
}

func BenchmarkDecideHTTP65k(b *testing.B) {
	benchDecide(b, Request{Stage: StageHTTP, Method: "GET", Scheme: "https", Host: "h500.c42.example.test",
		Path: "/docs/index.html"}, ActionAllow)
}

// BenchmarkLoad65k loads the largest policy the limits let in (MaxEntries).
func BenchmarkLoad65k(b *testing.B) {
	src := bigPolicy(65_000)
	b.ReportAllocs()
	b.ResetTimer()
	clock := startCPUClock(b, false) // all threads: the GC works in parallel
	for b.Loop() {
		if _, err := Parse("big.toml", src); err != nil {
			b.Fatal(err)
		}
	}
	clock.stop(b)
}

// TestDecideDoesNotAllocate keeps the zero-allocation promise of the dns
// and connect stages under `go test` (not only in benchmarks).
func TestDecideDoesNotAllocate(t *testing.T) {
	p, err := Parse("small.toml", bigPolicy(1000))
	if err != nil {
		t.Fatal(err)
	}
	reqs := map[string]Request{
		"connect exact":    {Stage: StageConnect, Host: "h4.c3.example.test", Port: 443},
		"connect wildcard": {Stage: StageConnect, SNI: "a.w5.c3.example.test", Port: 443, IP: netip.MustParseAddr("203.0.114.1")},
		"connect miss":     {Stage: StageConnect, SNI: "nowhere.example.test", Port: 443},
		"connect denied":   {Stage: StageConnect, SNI: "x.blocked.example.test", Port: 443},
		"connect private":  {Stage: StageConnect, SNI: "h4.c3.example.test", Port: 443, IP: netip.MustParseAddr("10.0.0.1")},
		"connect upper":    {Stage: StageConnect, Host: "H4.C3.EXAMPLE.TEST.", Port: 443},
		"dns":              {Stage: StageDNS, Host: "h4.c3.example.test", QType: 28},
		"dns txt":          {Stage: StageDNS, Host: "h4.c3.example.test", QType: 16},
		"http normal path": {Stage: StageHTTP, Method: "GET", Scheme: "https", Host: "h4.c3.example.test", Path: "/a/b.html"},
	}
	for name, r := range reqs {
		if n := testing.AllocsPerRun(100, func() { p.Decide(r) }); n != 0 {
			t.Errorf("%s: Decide allocates %v times per call, want 0", name, n)
		}
	}
}
