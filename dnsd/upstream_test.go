package dnsd

import (
	"fmt"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// Answers on the upstream sockets are matched strictly: a forged answer
// from another port, one with another ID, one for another name and a query
// in place of an answer are all read past, and the real answer that
// follows them is the one the client gets, whether the query came over
// UDP (the reader's first attempt) or TCP (a blocking exchange).
func TestForgedUpstreamAnswersIgnored(t *testing.T) {
	up, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	forger, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forger.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := up.ReadFrom(buf)
			if err != nil {
				return
			}
			q := new(dns.Msg)
			if q.Unpack(buf[:n]) != nil || len(q.Question) != 1 {
				continue
			}
			name := q.Question[0].Name
			answer := func(id uint16, owner, addr string, response bool) []byte {
				m := new(dns.Msg)
				m.SetReply(q)
				m.Id, m.Response = id, response
				m.Question[0].Name = owner
				rr, _ := dns.NewRR(owner + " 60 IN A " + addr)
				m.Answer = []dns.RR{rr}
				b, _ := m.Pack()
				return b
			}
			_, _ = forger.WriteTo(answer(q.Id, name, "5.6.7.8", true), from)
			_, _ = up.WriteTo(answer(q.Id+1, name, "5.6.7.8", true), from)
			_, _ = up.WriteTo(answer(q.Id, "x"+name, "5.6.7.8", true), from)
			_, _ = up.WriteTo(answer(q.Id, name, "5.6.7.8", false), from)
			_, _ = up.WriteTo(answer(q.Id, name, "1.2.3.4", true), from)
		}
	}()
	w := newWorld(t) // unused: the forging upstream above answers
	h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), func(c *Config) {
		c.Upstreams = []Upstream{{Addr: up.LocalAddr().String()}}
	})
	for _, netw := range []string{"udp", "tcp"} {
		for i := range 40 { // more than a socket carries: the sockets rotate meanwhile
			r := h.ask(t, netw, fmt.Sprintf("%s%d.example.test", netw, i), dns.TypeA)
			if diff := cmp.Diff([]string{"1.2.3.4"}, answers(r)); diff != "" {
				t.Fatalf("%s query %d: answers (-want +got):\n%s", netw, i, diff)
			}
		}
	}
}
