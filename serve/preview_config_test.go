package serve

import (
	"crypto/tls"
	"errors"
	"strings"
	"testing"

	"airlock/certs"
)

// [preview] is off without listen; with it, the host, certificate pair
// and ttls are checked and each problem is positioned.
func TestPreviewConfig(t *testing.T) {
	c, err := Parse("c.toml", []byte(minimal+"[preview]\nlisten = \"127.0.0.1:8443\"\nhost = \"preview.example.test\"\ndefault_ttl = \"1h\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Preview.Host != "preview.example.test" || c.Preview.Listen.Port() != 8443 || c.Preview.DefaultTTL.Hours() != 1 {
		t.Errorf("preview %+v", c.Preview)
	}
	bad := []struct{ name, src, want string }{
		{"host without listen", "host = \"p.example.test\"\n", "c.toml:8:1: preview.listen is required when preview.host is set"},
		{"no host", "listen = \"127.0.0.1:8443\"\n", "preview.host must be a lowercase DNS name"},
		{"bad host", "listen = \"127.0.0.1:8443\"\nhost = \"Preview..test\"\n", `not "Preview..test"`},
		{"wildcard host", "listen = \"127.0.0.1:8443\"\nhost = \"*.example.test\"\n", "preview.host must be"},
		{"cert without key", "listen = \"127.0.0.1:8443\"\nhost = \"p.example.test\"\ntls_cert = \"/c.pem\"\n", "go together"},
		{"ttl over max", "listen = \"127.0.0.1:8443\"\nhost = \"p.example.test\"\ndefault_ttl = \"2h\"\nmax_ttl = \"1h\"\n", "over preview.max_ttl"},
		{"typo", "listen = \"127.0.0.1:8443\"\nhost = \"p.example.test\"\nttl = \"1h\"\n", `unknown key "preview.ttl"`},
		{"negative rate", "listen = \"127.0.0.1:8443\"\nhost = \"p.example.test\"\nrate = -1.0\n", "must not be negative"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("c.toml", []byte(minimal+"[preview]\n"+tt.src))
			var errs Errors
			if !errors.As(err, &errs) || len(errs) != 1 || !strings.Contains(errs[0].Error(), tt.want) {
				t.Fatalf("err = %v, want one error containing %q", err, tt.want)
			}
		})
	}
}

// Minted preview certificates are only for ID.HOST: an SNI of another
// name, the bare host or a nested name gets none.
func TestPreviewTLSOnlyPreviewNames(t *testing.T) {
	ca, err := certs.Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a := &Appliance{ca: ca}
	cfg, err := a.previewTLS(PreviewConfig{Host: "preview.example.test"})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := cfg.GetCertificate(&tls.ClientHelloInfo{ServerName: "pv0123456789abcdef.preview.example.test"}); err != nil || c == nil {
		t.Fatalf("preview name: %v", err)
	}
	for _, n := range []string{"", "preview.example.test", "a.b.preview.example.test", "registry.example.test", "pv1.preview.example.test.evil.test"} {
		if _, err := cfg.GetCertificate(&tls.ClientHelloInfo{ServerName: n}); err == nil {
			t.Errorf("minted a certificate for %q", n)
		}
	}
}
