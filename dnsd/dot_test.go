package dnsd

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// startTLS serves the world over DNS-over-TLS with a throwaway certificate
// for dot.example.test and returns the address and a pool trusting it.
func (w *world) startTLS(t *testing.T) (string, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dot.example.test"},
		DNSNames: []string{"dot.example.test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	srv := &dns.Server{Net: "tcp-tls", Listener: ln, Handler: dns.HandlerFunc(w.serve), NotifyStartedFunc: func() { close(started) }}
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return ln.Addr().String(), pool
}

func TestDoTUpstream(t *testing.T) {
	w := newWorld(t)
	w.add("www.example.test. 60 IN A 1.2.3.4")
	addr, pool := w.startTLS(t)
	for _, tc := range []struct {
		name   string
		server string
		rcode  int
	}{
		{"verified", "dot.example.test", dns.RcodeSuccess},
		{"wrong name", "other.example.test", dns.RcodeServerFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := ParseUpstream("tls://" + addr + "#" + tc.server)
			if err != nil {
				t.Fatal(err)
			}
			u.TLS.RootCAs = pool
			h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), func(c *Config) { c.Upstreams = []Upstream{u} })
			r := h.ask(t, "udp", "www.example.test", dns.TypeA)
			if r.Rcode != tc.rcode {
				t.Fatalf("rcode %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
			}
			if tc.rcode == dns.RcodeSuccess && answers(r)[0] != "1.2.3.4" {
				t.Fatalf("answers %v", answers(r))
			}
		})
	}
	// Only the verified connection carried a query.
	if diff := cmp.Diff([]string{"www.example.test./A"}, w.queries()); diff != "" {
		t.Errorf("upstream queries (-want +got):\n%s", diff)
	}
}
