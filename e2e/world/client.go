package world

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Resolver resolves names through the world's DNS (from the host).
func (w *World) Resolver() *net.Resolver {
	dns := w.DNSAddr().String()
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, dns)
		},
	}
}

// HTTPClient is a client on the host that resolves through the world's
// DNS and trusts only the world's CA: what the appliance's upstream side
// looks like, without the appliance.
func (w *World) HTTPClient() *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, Resolver: w.Resolver()}
	return &http.Client{
		Timeout: 20 * time.Second,
		Transport: &http.Transport{
			Proxy:           nil,
			DialContext:     d.DialContext,
			TLSClientConfig: &tls.Config{RootCAs: w.caPool, MinVersion: tls.VersionTLS12},
		},
	}
}

// CurlResolve returns curl arguments that pin every world name to its
// address (--resolve NAME:443:ADDR), for clients run on the host.
func (w *World) CurlResolve() []string {
	var out []string
	for n, a := range w.Hosts() {
		out = append(out, "--resolve", fmt.Sprintf("%s:443:%s", n, a))
	}
	return out
}

// Command returns a command that runs inside the world's namespace (with
// ip netns exec), whose /etc/resolv.conf names the world's DNS — for
// checking the world's servers with real clients (git, npm, pip). The
// clients see only the world's CA when the caller sets it.
func (w *World) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	full := append([]string{"netns", "exec", w.NetNS, name}, args...)
	return exec.CommandContext(ctx, "ip", full...)
}

// etcNetNS writes /etc/netns/NAME/resolv.conf, which ip netns exec binds
// over /etc/resolv.conf. Removed on Close.
func (w *World) etcNetNS() error {
	dir := filepath.Join("/etc/netns", w.NetNS)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("world: %w", err)
	}
	w.addCloser(closerFunc(func() error { return os.RemoveAll(dir) }))
	conf := fmt.Sprintf("nameserver %s\noptions timeout:2 attempts:2\n", w.addrs[RoleDNS])
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(conf), 0o644); err != nil {
		return fmt.Errorf("world: %w", err)
	}
	return nil
}
