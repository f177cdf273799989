package dnsd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netns"

	"airlock/internal/tproxy"
)

func run(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// inNetns runs f with the calling thread in the named network namespace;
// sockets f creates stay there.
func inNetns(t *testing.T, name string, f func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err) // the thread would stay in the test namespace
		}
	}()
	f()
}

// A sandbox that sends its query to any resolver address gets dnsd's
// answer from that address: the server side is steered with nft tproxy in
// a namespace, the client uses connected (strict) sockets.
func TestTransparentAnswersFromOriginalDestination(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces and IP_TRANSPARENT")
	}
	for _, bin := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed", bin)
		}
	}
	suf := make([]byte, 3)
	_, _ = rand.Read(suf)
	id := hex.EncodeToString(suf)
	cns, sns := "dnsdc"+id, "dnsds"+id
	run(t, "ip", "netns", "add", cns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", cns).Run() })
	run(t, "ip", "netns", "add", sns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", sns).Run() })
	run(t, "ip", "-n", cns, "link", "add", "vc"+id, "type", "veth", "peer", "name", "vs"+id, "netns", sns)
	for _, c := range [][]string{
		{"-n", cns, "addr", "add", "198.18.200.2/24", "dev", "vc" + id},
		{"-n", cns, "link", "set", "vc" + id, "up"},
		{"-n", cns, "link", "set", "lo", "up"},
		{"-n", cns, "route", "add", "default", "via", "198.18.200.1"},
		{"-n", sns, "addr", "add", "198.18.200.1/24", "dev", "vs" + id},
		{"-n", sns, "link", "set", "vs" + id, "up"},
		{"-n", sns, "link", "set", "lo", "up"},
		{"-n", sns, "route", "add", "local", "0.0.0.0/0", "dev", "lo", "table", "100"},
		{"-n", sns, "rule", "add", "fwmark", "0x1", "lookup", "100"},
	} {
		run(t, append([]string{"ip"}, c...)...)
	}
	run(t, "ip", "netns", "exec", sns, "nft", `table ip airlock_dnsd_test {
  chain pre { type filter hook prerouting priority mangle;
    meta l4proto udp udp dport 53 tproxy to 198.18.200.1:53 meta mark set 0x1 accept
    meta l4proto tcp tcp dport 53 tproxy to 198.18.200.1:53 meta mark set 0x1 accept
  }
}`)

	var pc *net.UDPConn
	var ln *net.TCPListener
	inNetns(t, sns, func() {
		var err error
		if pc, err = tproxy.ListenUDP(context.Background(), "198.18.200.1:53"); err != nil {
			t.Fatal(err)
		}
		if ln, err = tproxy.ListenTCP(context.Background(), "198.18.200.1:53"); err != nil {
			t.Fatal(err)
		}
	})
	w := newWorld(t)
	w.add("www.example.test. 60 IN A 1.2.3.4")
	sandbox := netip.MustParseAddr("198.18.200.2")
	h := startServer(t, w, idents{sandbox: {ID: "sb1", Policy: webPolicy(t, "", "")}}, func(c *Config) {
		c.Listen, c.PacketConns, c.Listeners = nil, []net.PacketConn{pc}, []net.Listener{ln}
	})

	// The "hard-coded resolver" the sandbox asks is nowhere on the path.
	for _, netw := range []string{"udp", "tcp"} {
		var conn net.Conn
		inNetns(t, cns, func() {
			var err error
			conn, err = net.DialTimeout(netw, "198.19.53.53:53", 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
		})
		m := new(dns.Msg)
		m.SetQuestion("www.example.test.", dns.TypeA)
		co := &dns.Conn{Conn: conn}
		_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
		if err := co.WriteMsg(m); err != nil {
			t.Fatal(err)
		}
		r, err := co.ReadMsg() // a connected socket only takes replies from 198.19.53.53:53
		conn.Close()
		if err != nil {
			t.Fatalf("%s: no answer from the original destination: %v", netw, err)
		}
		if got := answers(r); len(got) != 1 || got[0] != "1.2.3.4" {
			t.Fatalf("%s: answers %v", netw, got)
		}
	}
	evs := h.rec.find("www.example.test")
	if len(evs) != 2 || evs[0].Sandbox != "sb1" || evs[0].DNS.Client != "198.18.200.2" {
		t.Fatalf("events: %+v", evs)
	}
	for i, netw := range []string{"udp", "tcp"} {
		if evs[i].DNS.Server != "198.19.53.53:53" {
			t.Errorf("%s event server %q, want the original destination", netw, evs[i].DNS.Server)
		}
	}
}
