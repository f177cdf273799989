package dnsd

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// FuzzFastParse: whenever the reader's own parser accepts a message,
// (*dns.Msg).Unpack accepts it too and reads the same header, question and
// OPT record.
func FuzzFastParse(f *testing.F) {
	for _, seed := range []func(*dns.Msg){
		func(m *dns.Msg) { m.SetQuestion("www.example.test.", dns.TypeA) },
		func(m *dns.Msg) { m.SetQuestion("WwW.Example.TEST.", dns.TypeAAAA); m.SetEdns0(1232, true) },
		func(m *dns.Msg) { m.SetQuestion(".", dns.TypeNS); m.CheckingDisabled = true },
		func(m *dns.Msg) {
			m.SetQuestion("_srv._tcp.a-b.test.", dns.TypeSRV)
			m.SetEdns0(512, false)
			m.Extra[0].(*dns.OPT).SetExtendedRcode(16)
		},
		func(m *dns.Msg) { m.SetQuestion("a\\.b.test.", dns.TypeA) },
	} {
		m := new(dns.Msg)
		seed(m)
		f.Add(wire(f, m))
	}
	f.Add([]byte("\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0c\x00\x01\x00\x01"))
	tab := make(names)
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast dns.Msg
		var st reqStore
		lower, ok := tab.fastParse(b, &fast, &st)
		if !ok {
			return
		}
		var slow dns.Msg
		if err := slow.Unpack(b); err != nil {
			t.Fatalf("fast parse accepted what Unpack refuses (%v): %q", err, b)
		}
		if diff := cmp.Diff(slow.MsgHdr, fast.MsgHdr); diff != "" {
			t.Errorf("header (-unpack +fast):\n%s", diff)
		}
		if diff := cmp.Diff(slow.Question, fast.Question); diff != "" {
			t.Errorf("question (-unpack +fast):\n%s", diff)
		}
		if lower != strings.ToLower(slow.Question[0].Name) {
			t.Errorf("lower %q for %q", lower, slow.Question[0].Name)
		}
		so, fo := slow.IsEdns0(), fast.IsEdns0()
		if (so == nil) != (fo == nil) || len(slow.Extra) != len(fast.Extra) || len(slow.Answer)+len(slow.Ns) != 0 {
			t.Fatalf("records: unpack %v, fast %v", slow.Extra, fast.Extra)
		}
		if so != nil && (so.Hdr.Class != fo.Hdr.Class || so.Hdr.Ttl != fo.Hdr.Ttl || len(so.Option) != 0) {
			t.Errorf("OPT: unpack %v, fast %v", so, fo)
		}
	})
}

// The UDP reader answers a cached name and denies a name without
// allocating once it has seen the name (the event included).
func TestUDPPathAllocations(t *testing.T) {
	s := benchServer(t)
	defer s.Close()
	for _, name := range []string{"www.example.test.", "www.denied.test."} {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		b := wire(t, m)
		s.ServeDNS(&discardWriter{fakeWriter{remote: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}}}, m) // cache it
		p := &packet{out: make([]byte, 0, 1232), src: netip.MustParseAddrPort("127.0.0.1:5353")}
		tab := make(names)
		run := func() {
			p.n = copy(p.buf[:], b)
			p.batched, p.queued = true, false
			if !s.handlePacket(p, tab) || !p.queued {
				t.Fatalf("%s: not answered on the reader", name)
			}
		}
		run()
		if got := testing.AllocsPerRun(200, run); got != 0 {
			t.Errorf("%s: %v allocations per query, want 0", name, got)
		}
	}
}
