package dnsd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"airlock/audit"
	"airlock/policies"
)

// webPolicy is a real policy allowing example.test and its subdomains
// (category "web"), with the given [dns] keys and extra TOML appended.
func webPolicy(t testing.TB, dnsKeys, extra string) *policies.Policy {
	t.Helper()
	return mustPolicy(t, "version = 1\n[dns]\n"+dnsKeys+`
[categories.web]
kind = "public_web"
hosts = ["example.test", "*.example.test"]
`+extra)
}

func mustPolicy(t testing.TB, src string) *policies.Policy {
	t.Helper()
	p, err := policies.Parse("test.toml", []byte(src))
	if err != nil {
		t.Fatalf("policy: %v\n%s", err, src)
	}
	return p
}

// recorder collects events.
type recorder struct {
	mu  sync.Mutex
	evs []audit.Event
}

func (r *recorder) Emit(e audit.Event) {
	if e.DNS != nil { // emitters must not retain events: dnsd reuses the record
		d := *e.DNS
		e.DNS = &d
	}
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.mu.Unlock()
}

// find returns the events of qname: those naming it, and those whose
// truncated name's hash is the hash of qname (lower case, fully
// qualified).
func (r *recorder) find(qname string) []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	fq := dns.Fqdn(qname)
	sum := sha256.Sum256([]byte(strings.ToLower(fq)))
	var out []audit.Event
	for _, e := range r.evs {
		if e.DNS == nil {
			continue
		}
		if strings.EqualFold(e.DNS.QName, fq) || e.DNS.QNameTruncated && e.DNS.QNameSHA256 == hex.EncodeToString(sum[:16]) {
			out = append(out, e)
		}
	}
	return out
}

// world is a test upstream resolver on 127.0.0.1 that records every query.
type world struct {
	mu      sync.Mutex
	zone    map[string][]dns.RR // "name/TYPE" -> answer
	nx      map[string]bool     // names answered NXDOMAIN with an SOA
	seen    []string            // "name/TYPE" of every query received, in order
	ports   []int               // source ports of UDP queries, in order
	delay   time.Duration
	tcOnUDP bool // answer UDP with TC set and no records
	addr    string
	udp     *dns.Server
	tcp     *dns.Server
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{zone: map[string][]dns.RR{}, nx: map[string]bool{}}
	w.start(t, "127.0.0.1:0")
	return w
}

func (w *world) start(t *testing.T, addr string) {
	t.Helper()
	var pc net.PacketConn
	var ln net.Listener
	for try := 0; ; try++ {
		var err error
		if pc, err = net.ListenPacket("udp", addr); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		if addr != "127.0.0.1:0" || try == 20 {
			t.Fatal(err) // a TCP socket holds the port chosen for UDP
		}
	}
	w.addr = pc.LocalAddr().String()
	started := make(chan struct{}, 2)
	notify := func() { started <- struct{}{} }
	w.udp = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(w.serve), NotifyStartedFunc: notify}
	w.tcp = &dns.Server{Listener: ln, Handler: dns.HandlerFunc(w.serve), NotifyStartedFunc: notify}
	go w.udp.ActivateAndServe()
	go w.tcp.ActivateAndServe()
	<-started
	<-started
	t.Cleanup(w.stop)
}

func (w *world) stop() {
	_ = w.udp.Shutdown()
	_ = w.tcp.Shutdown()
}

func (w *world) add(rrs ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			panic(err)
		}
		k := strings.ToLower(rr.Header().Name) + "/" + dns.Type(rr.Header().Rrtype).String()
		w.zone[k] = append(w.zone[k], rr)
	}
}

func (w *world) set(f func(*world)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(w)
}

func (w *world) queries() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.seen...)
}

func (w *world) saw(name string) bool {
	for _, q := range w.queries() {
		if strings.HasPrefix(q, dns.Fqdn(strings.ToLower(name))+"/") {
			return true
		}
	}
	return false
}

func (w *world) serve(rw dns.ResponseWriter, r *dns.Msg) {
	q := r.Question[0]
	k := strings.ToLower(q.Name) + "/" + dns.Type(q.Qtype).String()
	w.mu.Lock()
	w.seen = append(w.seen, k)
	if ua, ok := rw.RemoteAddr().(*net.UDPAddr); ok {
		w.ports = append(w.ports, ua.Port)
	}
	ans, nx, delay, tc := w.zone[k], w.nx[strings.ToLower(q.Name)], w.delay, w.tcOnUDP
	w.mu.Unlock()
	time.Sleep(delay)
	m := new(dns.Msg)
	m.SetReply(r)
	_, isUDP := rw.RemoteAddr().(*net.UDPAddr)
	switch {
	case tc && isUDP:
		m.Truncated = true
	case nx:
		m.Rcode = dns.RcodeNameError
		soa, _ := dns.NewRR(q.Name + " 300 IN SOA ns.example.test. host.example.test. 1 3600 600 86400 30")
		m.Ns = append(m.Ns, soa)
	default:
		for _, rr := range ans {
			rr = dns.Copy(rr)
			rr.Header().Name = q.Name
			m.Answer = append(m.Answer, rr)
		}
	}
	_ = rw.WriteMsg(m)
}

// idents maps source addresses to sandboxes.
type idents map[netip.Addr]Sandbox

func (m idents) Identify(src netip.Addr) (Sandbox, bool) {
	sb, ok := m[src]
	return sb, ok
}

var loopback = netip.MustParseAddr("127.0.0.1")

// harness is a running dnsd on 127.0.0.1 in front of a world.
type harness struct {
	srv   *Server
	world *world
	rec   *recorder
	udp   string
	tcp   string
}

func startServer(t *testing.T, w *world, id Identifier, mod func(*Config)) *harness {
	t.Helper()
	rec := &recorder{}
	cfg := Config{
		Listen:         []string{"127.0.0.1:0"},
		Identifier:     id,
		Emitter:        rec,
		Upstreams:      []Upstream{{Addr: w.addr}},
		Timeout:        time.Second,
		AttemptTimeout: 300 * time.Millisecond,
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	u, tc := s.Addrs()
	return &harness{srv: s, world: w, rec: rec, udp: u[0].String(), tcp: tc[0].String()}
}

// ask sends one query with EDNS to the harness over net ("udp" or "tcp").
func (h *harness) ask(t *testing.T, netw, name string, qtype uint16) *dns.Msg {
	t.Helper()
	return askFrom(t, netw, "", h.addrFor(netw), name, qtype)
}

func (h *harness) addrFor(netw string) string {
	if netw == "tcp" {
		return h.tcp
	}
	return h.udp
}

// askFrom sends a query from local address laddr ("" for any).
func askFrom(t *testing.T, netw, laddr, server, name string, qtype uint16) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: netw, Timeout: 3 * time.Second}
	if laddr != "" {
		ip := net.ParseIP(laddr)
		if netw == "tcp" {
			c.Dialer = &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 3 * time.Second}
		} else {
			c.Dialer = &net.Dialer{LocalAddr: &net.UDPAddr{IP: ip}, Timeout: 3 * time.Second}
		}
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.SetEdns0(1232, false)
	r, _, err := c.Exchange(m, server)
	if err != nil {
		t.Fatalf("query %s %s over %s: %v", name, dns.Type(qtype), netw, err)
	}
	return r
}

func answers(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		out = append(out, rrValue(rr))
	}
	return out
}

func ede(m *dns.Msg) *dns.EDNS0_EDE {
	if o := m.IsEdns0(); o != nil {
		for _, opt := range o.Option {
			if e, ok := opt.(*dns.EDNS0_EDE); ok {
				return e
			}
		}
	}
	return nil
}

// fakeWriter is a dns.ResponseWriter for handler tests without sockets.
type fakeWriter struct {
	remote net.Addr
	msg    *dns.Msg
}

func (f *fakeWriter) LocalAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(198, 18, 0, 1), Port: 53}
}
func (f *fakeWriter) RemoteAddr() net.Addr { return f.remote }
func (f *fakeWriter) WriteMsg(m *dns.Msg) error {
	if _, err := m.Pack(); err != nil {
		return err
	}
	f.msg = m
	return nil
}
func (f *fakeWriter) Write(b []byte) (int, error) {
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		return 0, err
	}
	f.msg = m
	return len(b), nil
}
func (f *fakeWriter) Close() error        { return nil }
func (f *fakeWriter) TsigStatus() error   { return nil }
func (f *fakeWriter) TsigTimersOnly(bool) {}
func (f *fakeWriter) Hijack()             {}

type countEmitter struct{ n int }

func (c *countEmitter) Emit(audit.Event) { c.n++ }
