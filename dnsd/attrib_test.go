package dnsd

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"airlock/audit"
)

// slowAttributor answers every lookup after delay, recording what it was
// asked.
type slowAttributor struct {
	delay time.Duration
	mu    sync.Mutex
	asked []string // proto local remote
}

func (a *slowAttributor) Attribute(sb, proto string, local, remote netip.AddrPort) *audit.Owner {
	a.mu.Lock()
	a.asked = append(a.asked, proto+" "+local.String()+" "+remote.String())
	a.mu.Unlock()
	o := audit.NewOwner()
	time.AfterFunc(a.delay, func() {
		o.Set(audit.Attribution{ExecID: "exec-" + sb, Pid: int(local.Port()), Comm: "dig", Status: audit.AttrSocket})
	})
	return o
}

// TestQueryAttribution: through the real server, a query's answer does
// not wait for the attribution lookup (it takes 300 ms here), its event
// does, and carries the exec id and pid; the lookup is asked about the
// client's own socket (its address and port) and the server it sent to,
// over UDP and TCP.
func TestQueryAttribution(t *testing.T) {
	w := newWorld(t)
	w.add("www.example.test. 60 IN A 1.2.3.4")
	at := &slowAttributor{delay: 300 * time.Millisecond}
	h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), func(c *Config) { c.Attributor = at })
	for _, netw := range []string{"udp", "tcp"} {
		conn, err := net.Dial(netw, h.addrFor(netw))
		if err != nil {
			t.Fatal(err)
		}
		m := new(dns.Msg)
		m.SetQuestion("www.example.test.", dns.TypeA)
		start := time.Now()
		dc := &dns.Conn{Conn: conn}
		if err := dc.WriteMsg(m); err != nil {
			t.Fatal(err)
		}
		r, err := dc.ReadMsg()
		took := time.Since(start)
		conn.Close()
		if err != nil || r.Rcode != dns.RcodeSuccess {
			t.Fatalf("%s: %v %v", netw, r, err)
		}
		if took > 200*time.Millisecond {
			t.Errorf("%s: the answer took %s: it waited for the attribution", netw, took)
		}
		local := conn.LocalAddr().String()
		want := netw + " " + local + " " + h.addrFor(netw)
		waitUntil(t, func() bool {
			at.mu.Lock()
			defer at.mu.Unlock()
			for _, a := range at.asked {
				if a == want {
					return true
				}
			}
			return false
		}, "the lookup of "+want)
		// The fake answers with the client's port as the pid.
		ap := netip.MustParseAddrPort(local)
		var ev audit.Event
		waitUntil(t, func() bool {
			for _, e := range h.rec.find("www.example.test") {
				if e.Pid == int(ap.Port()) {
					ev = e
					return true
				}
			}
			return false
		}, "the "+netw+" query's event")
		if ev.ExecID != "exec-sb1" || ev.Pid != int(ap.Port()) || ev.Comm != "dig" || ev.Attribution != audit.AttrSocket {
			t.Errorf("%s: event attribution %q %d %q %q, want exec-sb1 %d dig socket", netw, ev.ExecID, ev.Pid, ev.Comm, ev.Attribution, ap.Port())
		}
	}
}

func waitUntil(t *testing.T, ok func() bool, what string) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
