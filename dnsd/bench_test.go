package dnsd

import (
	"net"
	"testing"

	"github.com/miekg/dns"
)

func benchServer(b *testing.B) *Server {
	up := new(dns.Msg)
	q := new(dns.Msg)
	q.SetQuestion("www.example.test.", dns.TypeA)
	up.SetReply(q)
	rr, _ := dns.NewRR("www.example.test. 3600 IN A 1.2.3.4")
	up.Answer = append(up.Answer, rr)
	p := webPolicy(b, "", "")
	s, err := New(Config{Identifier: oneSandbox(p, false), Emitter: &countEmitter{}, Public: publicForTest,
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
