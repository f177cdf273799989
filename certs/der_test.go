package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"net"
	"strings"
	"testing"
	"time"
)

// A leaf carries what TLS clients check: the name (DNS or IP) in
// subjectAltName, server-auth usage, a digital-signature key usage, a
// validity inside the CA's, the CA as issuer with its key id, the leaf
// key, and a signature by the CA.
func TestLeafFields(t *testing.T) {
	ca, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + ".example.test"
	for _, name := range []string{"api.example.test", long, "*.wild.example.test", "198.18.0.7", "2001:db8::2"} {
		t.Run(name[:min(len(name), 20)], func(t *testing.T) {
			before := time.Now()
			c, err := ca.Leaf(name)
			if err != nil {
				t.Fatal(err)
			}
			l := c.Leaf
			if err := l.CheckSignatureFrom(ca.Certificate()); err != nil {
				t.Errorf("signature: %v", err)
			}
			if ip := net.ParseIP(strings.Trim(name, "[]")); ip != nil {
				if len(l.IPAddresses) != 1 || !l.IPAddresses[0].Equal(ip) || len(l.DNSNames) != 0 {
					t.Errorf("IP SANs %v DNS %v, want %v", l.IPAddresses, l.DNSNames, ip)
				}
			} else if len(l.DNSNames) != 1 || l.DNSNames[0] != name || len(l.IPAddresses) != 0 {
				t.Errorf("DNS SANs %v, want %q", l.DNSNames, name)
			}
			if l.Subject.CommonName != name {
				t.Errorf("CN %q, want %q", l.Subject.CommonName, name)
			}
			if l.KeyUsage != x509.KeyUsageDigitalSignature || len(l.ExtKeyUsage) != 1 || l.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
				t.Errorf("key usage %v, ext %v", l.KeyUsage, l.ExtKeyUsage)
			}
			if l.IsCA || l.Version != 3 || l.SignatureAlgorithm != x509.ECDSAWithSHA256 {
				t.Errorf("IsCA %v version %d alg %v", l.IsCA, l.Version, l.SignatureAlgorithm)
			}
			if !bytes.Equal(l.RawIssuer, ca.Certificate().RawSubject) || !bytes.Equal(l.AuthorityKeyId, ca.Certificate().SubjectKeyId) {
				t.Error("issuer or authority key id is not the CA's")
			}
			if l.NotBefore.After(before) || l.NotAfter.Before(before.Add(leafValidity-time.Hour)) || l.NotAfter.After(ca.Certificate().NotAfter) {
				t.Errorf("validity %v..%v", l.NotBefore, l.NotAfter)
			}
			if !l.PublicKey.(*ecdsa.PublicKey).Equal(c.PrivateKey.(*ecdsa.PrivateKey).Public()) {
				t.Error("the leaf's public key is not its private key's")
			}
			if l.SerialNumber.Sign() <= 0 {
				t.Errorf("serial %v", l.SerialNumber)
			}
			if len(c.Certificate) != 2 || !bytes.Equal(c.Certificate[1], ca.Certificate().Raw) {
				t.Error("the chain is not leaf then CA")
			}
		})
	}
}

// A Go TLS client that trusts the CA completes a handshake with a leaf.
func TestLeafTLSHandshake(t *testing.T) {
	ca, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	srv := tls.Server(a, ca.TLSConfig("fallback.example.test", nil))
	go srv.Handshake()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	cl := tls.Client(b, &tls.Config{ServerName: "hs.example.test", RootCAs: pool})
	b.SetDeadline(time.Now().Add(10 * time.Second))
	if err := cl.Handshake(); err != nil {
		t.Fatal(err)
	}
}

func TestDERTimeAndLength(t *testing.T) {
	for _, tm := range []time.Time{
		time.Date(2049, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(2050, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2031, 6, 5, 4, 3, 2, 0, time.FixedZone("x", 3600)),
	} {
		var got time.Time
		if rest, err := asn1.Unmarshal(derTime(tm), &got); err != nil || len(rest) > 0 {
			t.Fatalf("%v: %v", tm, err)
		}
		if !got.Equal(tm) {
			t.Errorf("%v came back as %v", tm, got)
		}
	}
	for _, n := range []int{0, 1, 127, 128, 255, 256, 65535, 65536} {
		var got []byte
		if rest, err := asn1.Unmarshal(der(0x04, make([]byte, n)), &got); err != nil || len(rest) > 0 || len(got) != n {
			t.Errorf("octet string of %d bytes: got %d, %v", n, len(got), err)
		}
	}
}

// BenchmarkMintDER compares one leaf signed from the DER template (what
// Leaf does) with the same leaf through x509.CreateCertificate.
func BenchmarkMintDER(b *testing.B) {
	ca, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	b.Run("template", func(b *testing.B) {
		for b.Loop() {
			der, err := ca.tmpl.sign("bench.example.test", serial(), now, now.Add(time.Hour))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := x509.ParseCertificate(der); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("x509", func(b *testing.B) {
		for b.Loop() {
			tmpl := &x509.Certificate{
				SerialNumber: serial(), Subject: pkix.Name{CommonName: "bench.example.test"},
				NotBefore: now, NotAfter: now.Add(time.Hour), DNSNames: []string{"bench.example.test"},
				KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			}
			der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &ca.leafKey.PublicKey, ca.key)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := x509.ParseCertificate(der); err != nil {
				b.Fatal(err)
			}
		}
	})
}
