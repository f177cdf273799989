package client

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"airlock/client/wire"
)

// TLSOptions say how a remote client checks the appliance's certificate.
// With neither set, the system roots decide.
type TLSOptions struct {
	// CAFile is a PEM bundle of roots to trust, e.g. the appliance CA
	// (`airlock ca export`) when serve minted its certificate from it.
	CAFile string
	// CAPEM is the same as PEM bytes.
	CAPEM []byte
	// Fingerprint pins a certificate of the chain the appliance presents:
	// the SHA-256 of its DER, in hex (colons and case do not matter), as
	// `airlock serve` logs it. Pinning the CA accepts every leaf it signs
	// for the host dialed; pinning the leaf accepts only that leaf.
	Fingerprint string
}

// NewRemote returns a client of the control API's TCP listener, which
// speaks TLS: base is "https://HOST:PORT", token a principal's bearer
// token (`airlock principal add`).
func NewRemote(base, token string, o TLSOptions) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("appliance url %q: want https://HOST:PORT", base)
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("appliance url %q: the control API's TCP listener speaks TLS: use https://", base)
	}
	cfg, err := o.ClientConfig(u.Hostname())
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{Proxy: nil, TLSClientConfig: cfg, MaxIdleConnsPerHost: 16}
	return &Client{hc: &http.Client{Transport: tr}, base: strings.TrimRight(base, "/"), token: token}, nil
}

// ClientConfig is the TLS configuration that checks the appliance named
// host as o says (for callers with their own transport, like airlock ui).
func (o TLSOptions) ClientConfig(host string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	pem := o.CAPEM
	if o.CAFile != "" {
		b, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca file: %w", err)
		}
		pem = append(append([]byte{}, pem...), b...)
	}
	if len(pem) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("ca file: no PEM certificate in it")
		}
		cfg.RootCAs = pool
	}
	if o.Fingerprint != "" {
		pin, err := ParseFingerprint(o.Fingerprint)
		if err != nil {
			return nil, err
		}
		// The pin replaces chain-of-trust verification; verifyPinned checks
		// the chain against the pinned certificate and the host name.
		cfg.InsecureSkipVerify = true
		cfg.VerifyPeerCertificate = verifyPinned(pin, host)
	}
	return cfg, nil
}

// ParseFingerprint reads a SHA-256 fingerprint in hex, with or without
// colons, any case.
func ParseFingerprint(s string) ([]byte, error) {
	h := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(strings.TrimSpace(s), "sha256:"), ":", ""))
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("fingerprint %q: want the 64 hex digits of a SHA-256 (as airlock serve logs it)", s)
	}
	return b, nil
}

func verifyPinned(pin []byte, host string) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		certs := make([]*x509.Certificate, 0, len(raw))
		for _, r := range raw {
			c, err := x509.ParseCertificate(r)
			if err != nil {
				return fmt.Errorf("appliance certificate: %w", err)
			}
			certs = append(certs, c)
		}
		for i, c := range certs {
			sum := sha256.Sum256(c.Raw)
			if !bytes.Equal(sum[:], pin) {
				continue
			}
			if i == 0 {
				return nil // the leaf itself is pinned
			}
			roots, inter := x509.NewCertPool(), x509.NewCertPool()
			roots.AddCert(c)
			for _, m := range certs[1:i] {
				inter.AddCert(m)
			}
			_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: host})
			if err != nil {
				return fmt.Errorf("appliance certificate is not valid for %s under the pinned CA: %w", host, err)
			}
			return nil
		}
		return fmt.Errorf("appliance certificate does not match the pinned fingerprint %x: check the fingerprint airlock serve logged", pin)
	}
}

// EnvURL, EnvToken, EnvCAFile and EnvFingerprint configure FromEnv for a
// remote appliance.
const (
	EnvURL         = wire.EnvURL
	EnvToken       = "AIRLOCK_TOKEN"
	EnvCAFile      = "AIRLOCK_CA_FILE"
	EnvFingerprint = "AIRLOCK_FINGERPRINT"
)

// Failing is a client whose every request fails with err: a bad remote
// configuration, reported on first use.
func Failing(err error) *Client {
	return &Client{hc: http.DefaultClient, base: "https://invalid", err: err}
}

// NewTransport returns a client whose requests go through rt to base
// (like "http://airlock"): the appliance's MCP endpoint calls its own API
// this way, in process, as the principal of each tool call.
func NewTransport(base string, rt http.RoundTripper) *Client {
	return &Client{hc: &http.Client{Transport: rt}, base: base}
}
