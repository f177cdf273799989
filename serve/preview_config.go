package serve

import (
	"net/netip"
	"regexp"
	"strings"
)

// PreviewConfig is the preview listener (ingress to sandbox ports,
// `airlock sandbox expose`): off unless Listen is set.
type PreviewConfig struct {
	Listen netip.AddrPort `toml:"listen"`
	// Host is the name previews are served under: https://ID.HOST/ (a
	// wildcard DNS record *.HOST points at Listen).
	Host string `toml:"host"`
	// TLSCert and TLSKey are a certificate for *.HOST (PEM); without them
	// each preview's certificate is minted from the appliance CA.
	TLSCert    string   `toml:"tls_cert"`
	TLSKey     string   `toml:"tls_key"`
	DefaultTTL Duration `toml:"default_ttl"` // 0: 30m
	MaxTTL     Duration `toml:"max_ttl"`     // 0: 24h
	// Rate and Burst bound requests per second per preview (0: 100, 200).
	Rate  float64 `toml:"rate"`
	Burst int     `toml:"burst"`
}

var dnsName = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,61}[a-z0-9]$`)

func (p *PreviewConfig) validate(add addFunc) {
	if !p.Listen.IsValid() {
		if p.Host != "" {
			add("preview.host", "preview.listen is required when preview.host is set")
		}
		return
	}
	if p.Host == "" || len(p.Host) > 200 || !dnsName.MatchString(p.Host) || strings.ToLower(p.Host) != p.Host {
		add("preview.host", "preview.host must be a lowercase DNS name (previews are served at ID.HOST), not %q", p.Host)
	}
	if (p.TLSCert == "") != (p.TLSKey == "") {
		add("preview.tls_cert", "preview.tls_cert and preview.tls_key go together")
	}
	if p.TLSCert != "" && p.TLSKey != "" {
		checkAbs(add, "preview.tls_cert", p.TLSCert)
		checkAbs(add, "preview.tls_key", p.TLSKey)
	}
	if p.MaxTTL.Duration != 0 && p.DefaultTTL.Duration > p.MaxTTL.Duration {
		add("preview.default_ttl", "preview.default_ttl %s is over preview.max_ttl %s", p.DefaultTTL, p.MaxTTL)
	}
	if p.Rate < 0 || p.Burst < 0 {
		add("preview.rate", "preview.rate and preview.burst must not be negative")
	}
}
