// Package certs owns the appliance's certificate authority: created on first
// start in the state directory (key 0600), the trust bundle handed to
// sandboxes, and the leaf certificates the proxy presents when it inspects
// TLS, minted per server name and cached.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"

	"airlock/internal/safefile"
)

// maxPEMFile caps what is read of ca.key and ca.crt (a P-256 key and its
// certificate are well under 4 KiB).
const maxPEMFile = 64 << 10

// File names inside the state directory.
const (
	KeyFile  = "ca.key"
	CertFile = "ca.crt"
)

// caValidity is how long a new CA is valid.
const caValidity = 5 * 365 * 24 * time.Hour

// ErrKeyPermissions is returned when the CA key file is readable by anyone
// but its owner.
var ErrKeyPermissions = errors.New("certs: CA key permissions are looser than 0600")

// CA is the appliance certificate authority and its leaf cache.
type CA struct {
	dir string

	mu      sync.RWMutex
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
	leafKey *ecdsa.PrivateKey
	tmpl    *leafTemplate
	cache   *leafCache
}

// ErrNoCA is returned by Load when the state directory holds no CA.
var ErrNoCA = errors.New("certs: no CA")

// ErrCAExists is returned by Create when the state directory holds a CA.
var ErrCAExists = errors.New("certs: a CA already exists")

// how open treats a missing or present CA.
type openMode int

const (
	loadOrCreate openMode = iota
	loadOnly
	createOnly
)

// Open loads the CA from stateDir, creating it (and the directory, 0700) on
// first start. It refuses a key file whose permissions allow group or other
// access.
func Open(stateDir string) (*CA, error) {
	return open(stateDir, DefaultCacheSize, loadOrCreate)
}

// OpenWithCache is Open with a leaf cache bounded to size entries.
func OpenWithCache(stateDir string, size int) (*CA, error) {
	return open(stateDir, size, loadOrCreate)
}

// Load loads the CA in stateDir and never creates one: a state directory
// or CA that does not exist is an error (ErrNoCA), so a mistyped directory
// cannot mint a CA nothing uses.
func Load(stateDir string) (*CA, error) {
	return open(stateDir, DefaultCacheSize, loadOnly)
}

// Create makes a new CA in stateDir (created 0700 if absent); it refuses
// to replace an existing one (ErrCAExists).
func Create(stateDir string) (*CA, error) {
	return open(stateDir, DefaultCacheSize, createOnly)
}

func open(stateDir string, size int, mode openMode) (*CA, error) {
	if stateDir == "" {
		return nil, errors.New("certs: empty state directory")
	}
	if mode == loadOnly {
		if _, err := os.Stat(stateDir); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: state directory %s does not exist", ErrNoCA, stateDir)
		}
	} else if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("certs: state directory: %w", err)
	}
	ca := &CA{dir: stateDir}
	keyPath := filepath.Join(stateDir, KeyFile)
	_, err := os.Stat(keyPath)
	switch {
	case errors.Is(err, fs.ErrNotExist) && mode == loadOnly:
		err = fmt.Errorf("%w in %s (no %s)", ErrNoCA, stateDir, KeyFile)
	case errors.Is(err, fs.ErrNotExist):
		err = ca.generate()
	case err == nil && mode == createOnly:
		err = fmt.Errorf("%w in %s", ErrCAExists, stateDir)
	case err == nil:
		err = ca.load()
	}
	if err != nil {
		return nil, err
	}
	ca.cache, err = newLeafCache(ca, size)
	if err != nil {
		return nil, err
	}
	return ca, nil
}

// load reads the key and certificate and checks that they belong together.
func (ca *CA) load() error {
	keyPath := filepath.Join(ca.dir, KeyFile)
	if err := checkKeyPerm(keyPath); err != nil {
		return err
	}
	keyPEM, err := safefile.ReadIn(ca.dir, KeyFile, maxPEMFile)
	if err != nil {
		return fmt.Errorf("certs: read key: %w", err)
	}
	certPEM, err := safefile.ReadIn(ca.dir, CertFile, maxPEMFile)
	if err != nil {
		return fmt.Errorf("certs: read certificate: %w", err)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return err
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		return err
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return fmt.Errorf("certs: %s does not match %s", CertFile, KeyFile)
	}
	return ca.install(cert, certPEM, key)
}

func checkKeyPerm(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("certs: key: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%w: %s is %04o", ErrKeyPermissions, path, st.Mode().Perm())
	}
	return nil
}

func parseKey(b []byte) (*ecdsa.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("certs: %s: no PEM block", KeyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %w", KeyFile, err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("certs: %s: not an ECDSA key", KeyFile)
	}
	return ek, nil
}

func parseCert(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("certs: %s: no CERTIFICATE block", CertFile)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %w", CertFile, err)
	}
	if !c.IsCA {
		return nil, fmt.Errorf("certs: %s: not a CA certificate", CertFile)
	}
	return c, nil
}

// generate creates a new CA and writes it to the state directory.
func (ca *CA) generate() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("certs: generate key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Airlock appliance CA " + now.UTC().Format("2006-01-02T15:04Z"), Organization: []string{"Airlock"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("certs: create CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("certs: parse CA: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("certs: marshal key: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if err := writeFile(filepath.Join(ca.dir, KeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(ca.dir, CertFile), certPEM, 0o644); err != nil {
		return err
	}
	return ca.install(cert, certPEM, key)
}

// writeFile writes atomically: a temporary file in the same directory,
// fsync, rename.
func writeFile(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	return nil
}

func (ca *CA) install(cert *x509.Certificate, certPEM []byte, key *ecdsa.PrivateKey) error {
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("certs: generate leaf key: %w", err)
	}
	tmpl, err := newLeafTemplate(cert, key, leafKey)
	if err != nil {
		return err
	}
	ca.mu.Lock()
	ca.cert, ca.certPEM, ca.key, ca.leafKey, ca.tmpl = cert, certPEM, key, leafKey, tmpl
	ca.mu.Unlock()
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		// crypto/rand never fails on Linux; a fixed serial is still unique per key.
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// CertPEM returns the CA certificate in PEM form: the trust bundle for
// sandboxes. It never contains the key.
func (ca *CA) CertPEM() []byte {
	ca.mu.RLock()
	defer ca.mu.RUnlock()
	return append([]byte(nil), ca.certPEM...)
}

// Certificate returns the parsed CA certificate.
func (ca *CA) Certificate() *x509.Certificate {
	ca.mu.RLock()
	defer ca.mu.RUnlock()
	return ca.cert
}

// Rotate replaces the CA with a new one (new key, new certificate), writes
// it to the state directory and drops every cached leaf. Sandboxes need the
// new CertPEM to trust inspected connections afterwards.
func (ca *CA) Rotate() error {
	if err := ca.generate(); err != nil {
		return err
	}
	ca.cache.purge()
	return nil
}

// Rotate opens the CA in stateDir (creating it if absent) and rotates it.
func Rotate(stateDir string) (*CA, error) {
	ca, err := Open(stateDir)
	if err != nil {
		return nil, err
	}
	if err := ca.Rotate(); err != nil {
		return nil, err
	}
	return ca, nil
}

// TLSConfig returns a server configuration that presents a leaf for the
// client's SNI (or fallback when the client sent none) with the given ALPN
// protocols.
func (ca *CA) TLSConfig(fallback string, nextProtos []string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
			name := hi.ServerName
			if name == "" {
				name = fallback
			}
			return ca.Leaf(name)
		},
	}
}
