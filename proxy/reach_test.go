package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"airlock/certs"
	"airlock/policies"
)

// labOrigin is an HTTPS origin for lab.example.test listening on one
// address, counting the requests it served.
type labOrigin struct {
	addr   netip.AddrPort
	caPEM  []byte
	served atomic.Int32
}

func startLabOrigin(t *testing.T, ip string) *labOrigin {
	t.Helper()
	_, caCert, caKey, caDER := testCA(t, "lab test CA")
	o := &labOrigin{caPEM: pemCert(caDER)}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	o.addr = ln.Addr().(*net.TCPAddr).AddrPort()
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			o.served.Add(1)
			fmt.Fprint(w, "lab origin")
		}),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{leafFor(t, caCert, caKey, []string{"lab.example.test"})}},
		ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0),
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return o
}

// labOperator is the lab appliance's settings: its world in the
// benchmarking range (and the loopback origin) as upstream allow-ranges.
var labOperator = policies.Operator{Allow: []netip.Prefix{
	netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("127.0.0.1/32"),
}}

// labProxy is a real proxy whose sandbox (127.0.0.1) has pol, resolving
// lab.example.test to the origin's address and dialing only that
// address (recorded). It returns an explicit-proxy HTTPS client.
func labProxy(t *testing.T, o *labOrigin, pol Decider) (*http.Client, *recorder, *dialLog) {
	t.Helper()
	ca, err := certs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ev, dials := &recorder{}, &dialLog{}
	p, err := New(Config{
		CA: ca, Emitter: ev, RootCAs: x509.NewCertPool(), ExtraCAPEM: [][]byte{o.caPEM},
		Identify: IdentifierFunc(func(a netip.Addr) (Sandbox, bool) {
			return Sandbox{ID: "sb1", Policy: pol}, a == netip.MustParseAddr("127.0.0.1")
		}),
		Resolver: fakeResolver{"lab.example.test": {o.addr.Addr()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p.testDial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.mu.Lock()
		dials.addrs = append(dials.addrs, addr)
		dials.mu.Unlock()
		if addr != o.addr.String() {
			return nil, fmt.Errorf("lab test: refusing to dial %s", addr)
		}
		return dialAddr(ctx, 5*time.Second, o.addr)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.ServeExplicit(ln)
	t.Cleanup(func() { ln.Close(); p.Close() })
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	tr := &http.Transport{
		Proxy:           func(*http.Request) (*url.URL, error) { return url.Parse("http://" + ln.Addr().String()) },
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, ev, dials
}

// addLoopbackAlias puts a lab address on lo for the test's life.
func addLoopbackAlias(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping the lab-range origin: adding a 198.18.0.0/15 address to lo needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipping the lab-range origin: no ip(8) to add a loopback alias")
	}
	ip := fmt.Sprintf("198.18.254.%d", 100+rand.IntN(100))
	if out, err := exec.Command("ip", "-4", "addr", "add", ip+"/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("add %s to lo: %v: %s", ip, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "-4", "addr", "del", ip+"/32", "dev", "lo").CombinedOutput(); err != nil {
			t.Errorf("remove %s from lo: %v: %s", ip, err, out)
		}
	})
	return ip
}

const labPolicy = `version = 1
[categories.lab]
kind = "public_web"
hosts = ["lab.example.test"]
ports = [PORT]
`

// TestDenyCIDRInsideUpstreamAllowRefused: an allowed name whose address is
// in both upstream.allow and [deny].cidrs is refused — the origin serves
// nothing and the proxy never dials it — while the same origin without the
// [deny] cidr is reached (so the refusal is the [deny] cidr's).
// docs/policy.md: a [deny] cidr is denied whatever any category says.
func TestDenyCIDRInsideUpstreamAllowRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		alias bool
	}{{"loopback origin", false}, {"lab-range origin", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ip := "127.0.0.1"
			if tc.alias {
				ip = addLoopbackAlias(t)
			}
			o := startLabOrigin(t, ip)
			src := strings.Replace(labPolicy, "PORT", fmt.Sprint(o.addr.Port()), 1)
			target := fmt.Sprintf("https://lab.example.test:%d/", o.addr.Port())

			allowed, err := policies.Parse("lab.toml", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			c, _, _ := labProxy(t, o, policies.Bind(allowed, labOperator))
			resp, err := c.Get(target)
			if err != nil {
				t.Fatalf("without [deny]: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || o.served.Load() != 1 {
				t.Fatalf("without [deny]: status %d, origin served %d; want 200 and 1", resp.StatusCode, o.served.Load())
			}

			denied, err := policies.Parse("lab.toml", []byte(src+"[deny]\ncidrs = [\""+ip+"\"]\n"))
			if err != nil {
				t.Fatal(err)
			}
			c, ev, dials := labProxy(t, o, policies.Bind(denied, labOperator))
			resp, err = c.Get(target)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("with [deny] cidrs = [%q]: got %d, want the tunnel refused", ip, resp.StatusCode)
			}
			if !strings.Contains(err.Error(), "Forbidden") {
				t.Errorf("with [deny]: %v, want 403 Forbidden for the CONNECT", err)
			}
			if n := o.served.Load(); n != 1 {
				t.Errorf("with [deny]: the origin served %d more requests", n-1)
			}
			if d := dials.list(); len(d) != 0 {
				t.Errorf("with [deny]: dialed %v", d)
			}
			e := ev.waitFor(t, "address deny", isDeny(ruleAddress))
			if !strings.Contains(e.Reason, "deny.cidrs[0]") || strings.Contains(e.Reason, ip) {
				t.Errorf("reason %q: want the [deny] rule named and the address not", e.Reason)
			}
		})
	}
}
