package dnsd

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// fuzzExchanger answers every upstream query with a fixed wire message,
// rewritten to match the query's ID and question when it parses.
type fuzzExchanger struct{ wire []byte }

func (f fuzzExchanger) exchange(_ context.Context, m *dns.Msg, _ Upstream, _ time.Time) (*dns.Msg, error) {
	r := new(dns.Msg)
	if err := r.Unpack(f.wire); err != nil {
		return nil, err
	}
	r.Id, r.Response, r.Question = m.Id, true, m.Question
	return r, nil
}

func newFuzzServer(t testing.TB, upstream []byte) *Server {
	p := webPolicy(t, "names_per_parent = 50\n", "")
	s, err := New(Config{
		Identifier: oneSandbox(p, true),
		Emitter:    &recorder{},
		Upstreams:  []Upstream{{Addr: "127.0.0.1:1"}},
		CacheSize:  -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.fwd.x = fuzzExchanger{upstream}
	return s
}

func wire(t testing.TB, m *dns.Msg) []byte {
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzHandler feeds hostile queries and hostile upstream answers through
// the whole chain: it must never panic, and every query gets an answer.
func FuzzHandler(f *testing.F) {
	q := new(dns.Msg)
	q.SetQuestion("www.example.test.", dns.TypeA)
	q.SetEdns0(65535, true)
	a := new(dns.Msg)
	a.SetReply(q)
	rr, _ := dns.NewRR(`www.example.test. 60 IN HTTPS 1 . alpn=h2 ech="AEX+DQ==" ipv4hint=10.0.0.1`)
	a.Answer = append(a.Answer, rr)
	rr, _ = dns.NewRR("www.example.test. 60 IN A 127.0.0.1")
	a.Answer = append(a.Answer, rr)
	f.Add(wire(f, q), wire(f, a))
	// A compression loop, a wrong count, a zero-length label, class CH.
	f.Add([]byte("\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0c\x00\x01\x00\x01"), wire(f, a))
	f.Add([]byte("\x00\x01\x01\x00\x00\x05\x00\x00\x00\x00\x00\x00\x03www\x00\x00\x01\x00\x01"), []byte("\x00\x01\x81\x80\x00\x01\x00\xff\x00\x00\x00\x00"))
	f.Add([]byte("\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x03"), wire(f, a))
	s := newFuzzServer(f, nil)
	f.Fuzz(func(t *testing.T, query, upstream []byte) {
		req := new(dns.Msg)
		if err := req.Unpack(query); err != nil {
			return // the server drops what does not parse; see TestMalformedPacketsIgnored
		}
		s.fwd.x = fuzzExchanger{upstream}
		w := &fakeWriter{remote: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}}
		s.ServeDNS(w, req)
		if w.msg == nil {
			t.Fatal("no answer written")
		}
	})
}
