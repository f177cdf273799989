package dnsd

import (
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// The chain runs on a fake ResponseWriter, without sockets.
func TestHandlerChainWithoutSockets(t *testing.T) {
	s := newFuzzServer(t, nil)
	up := new(dns.Msg)
	q := new(dns.Msg)
	q.SetQuestion("api.example.test.", dns.TypeA)
	up.SetReply(q)
	rr, _ := dns.NewRR("api.example.test. 60 IN A 169.254.169.254")
	up.Answer = append(up.Answer, rr)
	rr, _ = dns.NewRR("api.example.test. 60 IN A 1.2.3.4")
	up.Answer = append(up.Answer, rr)
	s.fwd.x = fuzzExchanger{wire(t, up)}
	for _, tc := range []struct {
		name  string
		class uint16
		rcode int
		n     int
	}{
		{"api.example.test.", dns.ClassINET, dns.RcodeSuccess, 1},
		{"api.example.test.", dns.ClassCHAOS, dns.RcodeRefused, 0},
		{"nope.test.", dns.ClassINET, dns.RcodeNameError, 0},
	} {
		req := new(dns.Msg)
		req.SetQuestion(tc.name, dns.TypeA)
		req.Question[0].Qclass = tc.class
		w := &fakeWriter{remote: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}}
		s.ServeDNS(w, req)
		if w.msg.Rcode != tc.rcode || len(w.msg.Answer) != tc.n || w.msg.Id != req.Id {
			t.Errorf("%s class %d: got %s with %d answers", tc.name, tc.class, dns.RcodeToString[w.msg.Rcode], len(w.msg.Answer))
		}
	}
}

// Garbage on the UDP socket is dropped and the server keeps answering.
func TestMalformedPacketsIgnored(t *testing.T) {
	w := newWorld(t)
	w.add("www.example.test. 60 IN A 1.2.3.4")
	h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), nil)
	c, err := net.Dial("udp", h.udp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, b := range [][]byte{{}, {0}, []byte("\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0c\x00\x01\x00\x01"), make([]byte, 4000)} {
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	// A slow TCP client does not hold the server either.
	tc, err := net.Dial("tcp", h.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	_, _ = tc.Write([]byte{0, 40, 1})
	time.Sleep(10 * time.Millisecond)
	if r := h.ask(t, "udp", "www.example.test", dns.TypeA); len(r.Answer) != 1 {
		t.Fatalf("answers after garbage: %v", answers(r))
	}
}

// One source holding many idle TCP connections does not lock out another.
func TestTCPConnectionsCappedPerSource(t *testing.T) {
	w := newWorld(t)
	w.add("www.example.test. 60 IN A 1.2.3.4")
	p := webPolicy(t, "", "")
	h := startServer(t, w, idents{loopback: {ID: "sb1", Policy: p}, netip.MustParseAddr("127.0.0.2"): {ID: "sb2", Policy: p}},
		func(c *Config) { c.TCPIdleTimeout, c.TCPReadTimeout = time.Minute, time.Minute })
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range maxTCPPerSource + 4 {
		c, err := net.Dial("tcp", h.tcp)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// The connections past the cap are closed by the server.
	extra := conns[len(conns)-1]
	_ = extra.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
		t.Errorf("a connection past the cap stayed open: %v", err)
	}
	if r := askFrom(t, "tcp", "127.0.0.2", h.tcp, "www.example.test", dns.TypeA); len(r.Answer) != 1 {
		t.Fatalf("other source over TCP: %v", answers(r))
	}
}
