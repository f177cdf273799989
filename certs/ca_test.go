package certs

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestOpenCreatesCAWithPrivateKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	ca, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key mode = %04o, want 0600", st.Mode().Perm())
	}
	c := ca.Certificate()
	if !c.IsCA || c.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("CA: IsCA=%v alg=%v", c.IsCA, c.PublicKeyAlgorithm)
	}
	if pem := string(ca.CertPEM()); !strings.Contains(pem, "CERTIFICATE") || strings.Contains(pem, "PRIVATE") {
		t.Errorf("CertPEM must hold the certificate and no key:\n%s", pem)
	}
	again, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if string(again.CertPEM()) != string(ca.CertPEM()) {
		t.Error("second Open created a new CA instead of loading the existing one")
	}
}

func TestOpenRefusesLooseKeyPermissions(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644} {
		if err := os.Chmod(filepath.Join(dir, KeyFile), mode); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(dir); !errors.Is(err, ErrKeyPermissions) {
			t.Errorf("mode %04o: err = %v, want ErrKeyPermissions", mode, err)
		}
	}
}

func TestOpenRefusesMismatchedPair(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	if _, err := Open(a); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(b); err != nil {
		t.Fatal(err)
	}
	crt, _ := os.ReadFile(filepath.Join(b, CertFile))
	if err := os.WriteFile(filepath.Join(a, CertFile), crt, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(a); err == nil {
		t.Fatal("Open accepted a certificate that does not match the key")
	}
}

func TestLeafVerifiesAgainstCA(t *testing.T) {
	ca, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"api.example.test", "127.0.0.1", "Mixed.Example.Test."} {
		leaf, err := ca.Leaf(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		pool := x509.NewCertPool()
		pool.AddCert(ca.Certificate())
		want := name
		if name == "Mixed.Example.Test." {
			want = "mixed.example.test"
		}
		if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: want}); err != nil {
			t.Errorf("%s: leaf does not verify: %v", name, err)
		}
	}
	if _, err := ca.Leaf("bad name\x00"); err == nil {
		t.Error("Leaf accepted a name with a NUL byte")
	}
}

func TestLeafCacheBoundedAndCoalesced(t *testing.T) {
	ca, err := OpenWithCache(t.TempDir(), 8)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := ca.Leaf(fmt.Sprintf("n%d.example.test", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := ca.CacheLen(); n > 8 {
		t.Errorf("cache holds %d leaves, bound is 8", n)
	}
	var wg sync.WaitGroup
	got := make([]any, 16)
	for i := range got {
		wg.Go(func() {
			c, err := ca.Leaf("same.example.test")
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = c
		})
	}
	wg.Wait()
	for i := range got {
		if got[i] != got[0] {
			t.Fatal("concurrent mints for one name returned different certificates")
		}
	}
}

func TestRotateReplacesCA(t *testing.T) {
	dir := t.TempDir()
	ca, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	old := ca.CertPEM()
	oldLeaf, _ := ca.Leaf("a.example.test")
	if err := ca.Rotate(); err != nil {
		t.Fatal(err)
	}
	if string(ca.CertPEM()) == string(old) {
		t.Fatal("Rotate kept the old certificate")
	}
	newLeaf, _ := ca.Leaf("a.example.test")
	if newLeaf == oldLeaf {
		t.Error("Rotate kept a leaf signed by the old CA")
	}
	re, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if string(re.CertPEM()) != string(ca.CertPEM()) {
		t.Error("rotated CA not persisted")
	}
	pool := x509.NewCertPool()
	pool.AddCert(re.Certificate())
	if _, err := newLeaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "a.example.test"}); err != nil {
		t.Errorf("new leaf does not verify against the rotated CA: %v", err)
	}
}

func BenchmarkLeafMint(b *testing.B) {
	ca, err := OpenWithCache(b.TempDir(), 1<<20)
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		if _, err := ca.Leaf(fmt.Sprintf("n%d.example.test", i)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLeafCached(b *testing.B) {
	ca, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := ca.Leaf("cached.example.test"); err != nil {
			b.Fatal(err)
		}
	}
}
