package serve

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"

	"airlock/internal/netx"
)

var policyName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// validate checks the config after defaults are applied; each problem is
// one positioned error naming its key.
func (c *Config) validate(loc locator) Errors {
	var errs Errors
	add := func(key, format string, args ...any) {
		errs = append(errs, loc.errorf(splitKey(key), format, args...))
	}
	if c.Version != 1 {
		if c.Version == 0 {
			add("version", "version is required: set version = 1")
		} else {
			add("version", "unsupported version %d: this airlock reads version = 1", c.Version)
		}
	}
	checkAbs(add, "state_dir", c.StateDir)
	checkAbs(add, "policy_dir", c.PolicyDir)
	checkAbs(add, "runtime_dir", c.RuntimeDir)
	if c.DefaultPolicy != "" && !policyName.MatchString(c.DefaultPolicy) {
		add("default_policy", "invalid policy name %q (letters, digits, '.', '_', '-')", c.DefaultPolicy)
	}
	c.Network.validate(add)
	c.Listen.validate(add)
	c.Control.validate(add)
	c.Upstream.validate(add)
	c.Packages.Cache.validate(add)
	for i, d := range c.Packages.OSV {
		if !filepath.IsAbs(d) {
			add("packages.osv", "packages.osv[%d]: must be an absolute path, not %q", i, d)
		}
	}
	if c.Secrets.File != "" {
		checkAbs(add, "secrets.file", c.Secrets.File)
	}
	if c.Audit.Store != "" {
		checkAbs(add, "audit.store", c.Audit.Store)
	}
	if c.Audit.JSONL != "" && c.Audit.JSONL != "stdout" {
		checkAbs(add, "audit.jsonl", c.Audit.JSONL)
	}
	checkNode(add, c.Audit.Node)
	if c.Podman.Socket != "" {
		checkAbs(add, "podman.socket", c.Podman.Socket)
	}
	if m := c.Metrics.Listen; m.IsValid() && !m.Addr().IsLoopback() {
		add("metrics.listen", "metrics must listen on a loopback address, not %s", m.Addr())
	}
	if n := c.Network.capacity(); c.Sandbox.Max < 0 || n > 0 && c.Sandbox.Max > n {
		add("sandbox.max", "sandbox.max %d does not fit the pool %s (%d addresses)",
			c.Sandbox.Max, c.Network.Pool, c.Network.capacity())
	}
	for _, x := range []struct {
		key string
		mb  int64
	}{{"artifacts.max_total_mb", c.Artifacts.MaxTotalMB}, {"artifacts.max_sandbox_mb", c.Artifacts.MaxSandboxMB},
		{"artifacts.max_file_mb", c.Artifacts.MaxFileMB}, {"artifacts.max_workspace_mb", c.Artifacts.MaxWorkspaceMB},
		{"artifacts.max_commands_mb", c.Artifacts.MaxCommandsMB}, {"sandbox.max_file_mb", c.Sandbox.MaxFileMB}} {
		if x.mb < 0 || x.mb > 1<<30 {
			add(x.key, "%s must be between 0 (the default) and %d, not %d", x.key, 1<<30, x.mb)
		}
	}
	c.Pool.validate(add, c.Network.capacity(), c.Sandbox.Max)
	c.Preview.validate(add)
	return errs
}

type addFunc func(key, format string, args ...any)

func checkAbs(add addFunc, key, path string) {
	if !filepath.IsAbs(path) {
		add(key, "%s must be an absolute path, not %q", key, path)
	}
}

func (n *Network) validate(add addFunc) {
	p, gw := n.Pool, n.Gateway
	switch {
	case !p.IsValid():
		add("network.pool", "network.pool is required (e.g. \"198.18.64.0/24\")")
	case !p.Addr().Is4():
		add("network.pool", "network.pool must be IPv4 (sandboxes have no IPv6)")
	case p != p.Masked():
		add("network.pool", "network.pool %s has host bits set; did you mean %s?", p, p.Masked())
	case p.Bits() < 20 || p.Bits() > 29:
		// The kernel path keys per-sandbox counters by a number below 4096.
		add("network.pool", "network.pool must be between /20 and /29, not /%d", p.Bits())
	}
	switch {
	case !gw.IsValid():
		add("network.gateway", "network.gateway is required (e.g. \"198.18.64.1\")")
	case !gw.Is4() || gw.IsUnspecified() || gw.IsLoopback() || gw.IsMulticast():
		add("network.gateway", "network.gateway %s must be a unicast IPv4 address", gw)
	case p.IsValid() && p.Addr().Is4() && (gw == p.Masked().Addr() || gw == netx.LastAddr(p)):
		add("network.gateway", "network.gateway %s is the pool's network or broadcast address", gw)
	}
}

// capacity is how many sandbox addresses the pool holds (network,
// broadcast and gateway excluded).
func (n *Network) capacity() int {
	if !n.Pool.IsValid() || !n.Pool.Addr().Is4() || n.Pool.Bits() < 20 {
		return 0
	}
	size := 1<<(32-n.Pool.Bits()) - 2
	if n.Pool.Contains(n.Gateway) {
		size--
	}
	return size
}

func (l *Listen) validate(add addFunc) {
	seen := map[uint16]string{}
	for _, p := range []struct {
		key  string
		port uint16
	}{
		{"listen.proxy_transparent_port", l.ProxyTransparent},
		{"listen.proxy_explicit_port", l.ProxyExplicit},
		{"listen.dns_port", l.DNS},
	} {
		if other, dup := seen[p.port]; dup {
			add(p.key, "port %d is already used by %s", p.port, other)
		}
		seen[p.port] = p.key
	}
}

func (c *Control) validate(add addFunc) {
	checkAbs(add, "control.socket", c.Socket)
	if c.TCP.IsValid() && c.TokenFile == "" && c.PrincipalsFile == "" {
		add("control.tcp", "control.tcp needs control.token_file (one admin bearer token, mode 0600) or control.principals_file (callers, their token hashes, scopes and quotas; see `airlock principal add`)")
	}
	for _, f := range []struct{ key, path string }{{"control.token_file", c.TokenFile},
		{"control.principals_file", c.PrincipalsFile}, {"control.tls_cert", c.TLSCert}, {"control.tls_key", c.TLSKey}} {
		if f.path != "" {
			checkAbs(add, f.key, f.path)
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		add("control.tls_cert", "control.tls_cert and control.tls_key go together: give both, or neither to mint a certificate from the appliance CA")
	}
	if c.TCP.IsValid() && c.TCP.Port() == 0 {
		add("control.tcp", "control.tcp needs a port")
	}
}

func (u *Upstream) validate(add addFunc) {
	if len(u.Resolvers) == 0 {
		add("upstream.resolvers", "upstream.resolvers is required: at least one DNS server (\"addr:port\")")
	}
	for i, r := range u.Resolvers {
		if !r.Addr().IsValid() || r.Addr().IsUnspecified() {
			add("upstream.resolvers", "upstream.resolvers[%d]: %s is not a usable address", i, r)
		}
	}
	for i, p := range u.Allow {
		if p != p.Masked() {
			add("upstream.allow", "upstream.allow[%d]: %s has host bits set; did you mean %s?", i, p, p.Masked())
		}
		if p.Bits() == 0 {
			add("upstream.allow", "upstream.allow[%d]: %s allows every address; name the lab's range", i, p)
		}
	}
	for i, f := range u.CAFiles {
		if !filepath.IsAbs(f) {
			add("upstream.ca_files", "upstream.ca_files[%d]: must be an absolute path, not %q", i, f)
		}
	}
}

// AllowsUpstream reports whether addr is in an explicitly allowed
// upstream range.
func (u *Upstream) AllowsUpstream(addr netip.Addr) bool {
	for _, p := range u.Allow {
		if p.Contains(addr.Unmap()) {
			return true
		}
	}
	return false
}

// String is a one-line summary for logs.
func (c *Config) String() string {
	return fmt.Sprintf("config %s: pool %s gateway %s socket %s", c.File, c.Network.Pool, c.Network.Gateway, c.Control.Socket)
}

// checkNode: the node name goes into every record and a shipper's
// indexes: printable, without spaces, at most 253 bytes.
func checkNode(add func(key, format string, args ...any), n string) {
	switch {
	case n == "":
		add("audit.node", "audit.node: the host name is unknown; set audit.node")
	case len(n) > 253:
		add("audit.node", "audit.node: %d bytes, at most 253", len(n))
	case strings.IndexFunc(n, func(r rune) bool { return r <= ' ' || r == 0x7f || !unicode.IsPrint(r) }) >= 0:
		add("audit.node", "audit.node %q: only printable characters without spaces", n)
	}
}
