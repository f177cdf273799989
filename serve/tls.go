package serve

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"

	"airlock/certs"
	"airlock/internal/safefile"
)

// maxTLSFile caps control.tls_cert and control.tls_key.
const maxTLSFile = 1 << 20

// controlTLS is the TCP listener's TLS: the configured certificate, or
// leaves minted from the appliance CA for the name the client asks for
// (or the address it dialed). It returns the SHA-256 fingerprint a client
// pins: the certificate's own, or the CA's (leaves are re-minted daily;
// the CA stays).
func controlTLS(c Control, ca *certs.CA) (*tls.Config, string, error) {
	if c.TLSCert != "" {
		return configuredTLS(c.TLSCert, c.TLSKey)
	}
	if ca == nil {
		return nil, "", fmt.Errorf("control tls: no certificate configured and no appliance CA")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
		name := hi.ServerName
		if name == "" && hi.Conn != nil {
			if ta, ok := hi.Conn.LocalAddr().(*net.TCPAddr); ok {
				name = ta.IP.String()
			}
		}
		return ca.Leaf(name)
	}}
	return cfg, Fingerprint(ca.Certificate().Raw), nil
}

func configuredTLS(certFile, keyFile string) (*tls.Config, string, error) {
	certPEM, err := safefile.Read(certFile, maxTLSFile)
	if err != nil {
		return nil, "", fmt.Errorf("control.tls_cert: %w", err)
	}
	keyPEM, err := safefile.ReadPrivate(keyFile, maxTLSFile)
	if err != nil {
		return nil, "", fmt.Errorf("control.tls_key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, "", fmt.Errorf("control.tls_cert %s / control.tls_key %s: %w", certFile, keyFile, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, "", fmt.Errorf("control.tls_cert %s: %w", certFile, err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}, Fingerprint(leaf.Raw), nil
}

// Fingerprint is the lowercase hex SHA-256 of a certificate's DER.
func Fingerprint(der []byte) string {
	s := sha256.Sum256(der)
	return hex.EncodeToString(s[:])
}
