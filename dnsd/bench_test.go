package dnsd

import (
	"net"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func benchServer(b testing.TB) *Server {
	up := new(dns.Msg)
	q := new(dns.Msg)
	q.SetQuestion("www.example.test.", dns.TypeA)
	up.SetReply(q)
	rr, _ := dns.NewRR("www.example.test. 3600 IN A 1.2.3.4")
	up.Answer = append(up.Answer, rr)
	p := webPolicy(b, "", "")
	s, err := New(Config{Identifier: oneSandbox(p, false), Emitter: &countEmitter{},
		Upstreams: []Upstream{{Addr: "127.0.0.1:1"}}})
	if err != nil {
		b.Fatal(err)
	}
	s.fwd.x = fuzzExchanger{wire(b, up)}
	return s
}

// BenchmarkServeDNSCached is the hot path: an allowed name from the cache.
func BenchmarkServeDNSCached(b *testing.B) {
	s := benchServer(b)
	req := new(dns.Msg)
	req.SetQuestion("www.example.test.", dns.TypeA)
	w := &discardWriter{fakeWriter{remote: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}}}
	s.ServeDNS(w, req)
	b.ReportAllocs()
	for b.Loop() {
		s.ServeDNS(w, req)
	}
}

// BenchmarkServeDNSDenied is a name no category covers.
func BenchmarkServeDNSDenied(b *testing.B) {
	s := benchServer(b)
	req := new(dns.Msg)
	req.SetQuestion("www.denied.test.", dns.TypeA)
	w := &discardWriter{fakeWriter{remote: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}}}
	b.ReportAllocs()
	for b.Loop() {
		s.ServeDNS(w, req)
	}
}

// discardWriter drops answers, so benchmarks count only the server's work.
type discardWriter struct{ fakeWriter }

var benchLocal = &net.UDPAddr{IP: net.IPv4(198, 18, 0, 1), Port: 53}

func (d *discardWriter) LocalAddr() net.Addr         { return benchLocal }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteMsg(m *dns.Msg) error   { _, err := m.Pack(); return err }

// The cache-hit path allocates only the query and its event's DNS record:
// clients, servers and rules are formatted once, labels checked in place.
func TestCachedHitAllocations(t *testing.T) {
	s := benchServer(t)
	defer s.Close()
	req := new(dns.Msg)
	req.SetQuestion("www.example.test.", dns.TypeA)
	w := &discardWriter{fakeWriter{remote: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}}}
	s.ServeDNS(w, req)
	got := testing.AllocsPerRun(200, func() { s.ServeDNS(w, req) })
	if got > 2 {
		t.Errorf("cache hit: %v allocations per query, want at most 2", got)
	}
	rec := &recorder{}
	s.emit = rec
	s.ServeDNS(w, req)
	if e := rec.evs[0]; !e.DNS.CacheHit || e.DNS.Client != "127.0.0.1" || e.DNS.Server != "198.18.0.1:53" ||
		!strings.HasPrefix(e.Rule, "categories.web.hosts") {
		t.Errorf("memoised event fields: rule %q %+v", e.Rule, *e.DNS)
	}
}

func TestCheckLengths(t *testing.T) {
	l63, l64 := strings.Repeat("a", 63), strings.Repeat("b", 64)
	long := strings.Repeat("abcdefghi.", 25) + "example.test." // 263 bytes
	for _, tc := range []struct {
		name, want string
	}{
		{".", ""},
		{"example.test.", ""},
		{l63 + ".example.test.", ""},
		{l64 + ".example.test.", GuardLabelLength},
		{"www." + l64 + ".", GuardLabelLength},
		{"www.example." + l64, GuardLabelLength},
		{long, GuardNameLength},
	} {
		if got := checkLengths(tc.name, 0, 0); got != tc.want {
			t.Errorf("checkLengths(%.20q...) = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := checkLengths("abcdef.test.", 5, 0); got != GuardLabelLength {
		t.Errorf("max_label 5: %q", got)
	}
}
