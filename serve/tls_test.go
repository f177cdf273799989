package serve

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock/client"
)

// writeSelfSigned writes a certificate for 127.0.0.1 and its key (0600).
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "control.example.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "control.crt"), filepath.Join(dir, "control.key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

// TestConfiguredControlTLS: control.tls_cert/tls_key are served, their
// fingerprint is the one reported, and the Go client pins it; a key that
// others may read is refused.
func TestConfiguredControlTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeSelfSigned(t, dir)
	cfg, fp, err := controlTLS(Control{TLSCert: certFile, TLSKey: keyFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTPServer((&API{Backend: newFake(), Token: "admin-token-0123456789abcdef"}).Handler())
	go srv.Serve(tls.NewListener(l, cfg))
	defer srv.Close()
	base := "https://" + l.Addr().String()
	if got := leafFingerprint(t, base); got != fp {
		t.Errorf("served certificate %s, reported fingerprint %s", got, fp)
	}
	c, err := client.NewRemote(base, "admin-token-0123456789abcdef", client.TLSOptions{Fingerprint: fp})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.List(context.Background()); err != nil {
		t.Errorf("pinned configured certificate: %v", err)
	}
	pemCert, _ := os.ReadFile(certFile)
	c2, _ := client.NewRemote(base, "admin-token-0123456789abcdef", client.TLSOptions{CAPEM: pemCert})
	if _, err := c2.List(context.Background()); err != nil {
		t.Errorf("configured certificate as the CA bundle: %v", err)
	}
	os.Chmod(keyFile, 0o644)
	if _, _, err := controlTLS(Control{TLSCert: certFile, TLSKey: keyFile}, nil); err == nil || !strings.Contains(err.Error(), "control.tls_key") {
		t.Errorf("a world-readable key: %v, want refused", err)
	}
	if _, _, err := controlTLS(Control{TLSCert: keyFile, TLSKey: keyFile}, nil); err == nil {
		t.Error("a key as the certificate was accepted")
	}
}

func TestControlTLSConfigKeys(t *testing.T) {
	for _, tc := range []struct{ extra, want string }{
		{"tcp = \"127.0.0.1:7443\"\nprincipals_file = \"/etc/airlock/principals.toml\"\ntls_cert = \"/etc/airlock/c.crt\"\n",
			"control.tls_cert and control.tls_key go together"},
		{"tcp = \"127.0.0.1:7443\"\nprincipals_file = \"principals.toml\"\n", "control.principals_file must be an absolute path"},
	} {
		_, err := Parse("c.toml", []byte(minimal+"[control]\n"+tc.extra))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.extra, err, tc.want)
		}
	}
	if _, err := Parse("c.toml", []byte(minimal+"[control]\ntcp = \"127.0.0.1:7443\"\nprincipals_file = \"/etc/airlock/principals.toml\"\n")); err != nil {
		t.Errorf("tcp with only principals_file: %v", err)
	}
}
