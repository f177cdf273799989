// Package serve is the wiring of the Airlock appliance: the appliance
// config, the registry of sandboxes (address → sandbox, policy, secrets)
// that the proxy and dnsd identify clients through, the secret store,
// approvals for held requests, metrics, the control API, reconcile on
// start and graceful shutdown.
package serve

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"airlock/audit"
	"airlock/internal/safefile"
)

// Config is the appliance configuration (docs/config.md). Load fills in
// defaults and validates it; a Config from Load is ready to use.
type Config struct {
	Version int `toml:"version"`
	// StateDir holds the CA, the audit store, the sandbox records and the
	// runtime state. Created 0700 on start.
	StateDir string `toml:"state_dir"`
	// RuntimeDir holds each sandbox's runtime files that the sandbox user
	// must reach (resolv.conf, CA bundle, workspace baselines), below
	// RUNTIME_DIR/INSTANCE. It and its parents must be searchable by others.
	RuntimeDir string `toml:"runtime_dir"`
	// PolicyDir holds the policy files, one per name (NAME.toml).
	PolicyDir string `toml:"policy_dir"`
	// DefaultPolicy is the policy a sandbox gets when it names none.
	DefaultPolicy string `toml:"default_policy"`

	Network  Network       `toml:"network"`
	Listen   Listen        `toml:"listen"`
	Control  Control       `toml:"control"`
	Upstream Upstream      `toml:"upstream"`
	Secrets  SecretsConfig `toml:"secrets"`
	Audit    Audit         `toml:"audit"`
	Podman   Podman        `toml:"podman"`
	Metrics  MetricsConfig `toml:"metrics"`
	Sandbox  Sandbox       `toml:"sandbox"`
	Approval Approval      `toml:"approvals"`
	// Artifacts bounds what is kept of each sandbox after it ends.
	Artifacts Artifacts `toml:"artifacts"`
	// Pool is the warm pools (pool.go).
	Pool PoolConfig `toml:"pool"`
	// Packages is package governance that is the appliance's, not a
	// policy's: the malicious-package denylist.
	Packages PackagesConfig `toml:"packages"`
	// Preview is the preview listener (preview_config.go).
	Preview PreviewConfig `toml:"preview"`

	// File is the path the config was loaded from ("" when built in code).
	File string `toml:"-"`
}

// Network is the sandbox network: each sandbox gets one /32 from Pool and
// a route via Gateway, the host end of its veth.
type Network struct {
	Pool    netip.Prefix `toml:"pool"`
	Gateway netip.Addr   `toml:"gateway"`
}

// Listen holds the ports the appliance serves sandboxes on. All of them
// listen on the gateway address; the bpf path steers sandbox traffic to
// them whatever address the sandbox dialed.
type Listen struct {
	ProxyTransparent uint16 `toml:"proxy_transparent_port"`
	ProxyExplicit    uint16 `toml:"proxy_explicit_port"`
	DNS              uint16 `toml:"dns_port"`
}

// Control is the control API: a unix socket (root-owned, group Group,
// mode 0660; its caller is the admin principal "local") and optionally
// TCP over TLS, whose callers are the principals of PrincipalsFile and
// the admin "token" of TokenFile, by their bearer tokens.
type Control struct {
	Socket         string         `toml:"socket"`
	Group          string         `toml:"group"`
	TCP            netip.AddrPort `toml:"tcp"`
	TokenFile      string         `toml:"token_file"`
	PrincipalsFile string         `toml:"principals_file"`
	// TLSCert and TLSKey are the TCP listener's certificate and key (PEM);
	// without them a certificate is minted from the appliance CA.
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
}

// Upstream is how the appliance reaches the world.
type Upstream struct {
	// Resolvers are the DNS servers dnsd forwards to (addr:port).
	Resolvers []Resolver `toml:"resolvers"`
	// Allow lists non-public ranges the proxy and dnsd may still reach
	// upstream (a lab's world in 198.18.0.0/15, say). The address
	// classifier is never weakened; these ranges are named explicitly.
	Allow []netip.Prefix `toml:"allow"`
	// CAFiles are extra PEM roots trusted for upstream TLS, on top of the
	// system roots.
	CAFiles []string `toml:"ca_files"`
}

// SecretsConfig is the appliance's secret store: a file of name=value lines,
// mode 0600 or stricter, owned by root.
type SecretsConfig struct {
	File string `toml:"file"`
}

// Audit configures where events go.
type Audit struct {
	// Store is the embedded store's database file ("" = STATE_DIR/audit.db).
	Store string `toml:"store"`
	// JSONL is a file the JSONL stream is written to, "stdout", or "" for none.
	JSONL string `toml:"jsonl"`
	// JSONLFormat is the stream's flavor: "airlock" (default) or "ocsf".
	JSONLFormat audit.Format `toml:"jsonl_format"`
	// Node names this appliance in every record (default: the host name).
	Node string `toml:"node"`
	// Retention is how long the store keeps events (0 = forever).
	Retention Duration `toml:"retention"`
}

// Podman says how the appliance reaches the sandbox user's Podman service.
type Podman struct {
	User   string `toml:"user"`
	Socket string `toml:"socket"` // "" = /run/user/UID/podman/podman.sock
}

// MetricsConfig is the Prometheus endpoint; it must be a loopback address.
type MetricsConfig struct {
	Listen netip.AddrPort `toml:"listen"`
}

// Sandbox holds defaults for sandboxes that do not set their own.
type Sandbox struct {
	Image       string   `toml:"image"`
	ExecTimeout Duration `toml:"exec_timeout"`
	Lifetime    Duration `toml:"lifetime"`
	// IdleTimeout destroys a sandbox no command ran in for this long (0:
	// none), unless its create sets its own.
	IdleTimeout Duration `toml:"idle_timeout"`
	Max         int      `toml:"max"`
	// MaxFileMB bounds one file read or written through the agent's files
	// API, in MiB (0: runner.DefaultMaxFileBytes).
	MaxFileMB int64 `toml:"max_file_mb"`
}

// Artifacts bounds the artifacts kept of ended sandboxes, in
// STATE_DIR/artifacts/INSTANCE/ (0 = the default).
type Artifacts struct {
	MaxAge       Duration `toml:"max_age"`        // removed after this (default 7d)
	MaxTotalMB   int64    `toml:"max_total_mb"`   // all sandboxes; the oldest go first (default 4096)
	MaxSandboxMB int64    `toml:"max_sandbox_mb"` // one sandbox (default 256)
	MaxFileMB    int64    `toml:"max_file_mb"`    // one changed file or output (default 16)
	// MaxWorkspaceMB bounds the copy of /workspace an export diffs (default 1024).
	MaxWorkspaceMB int64 `toml:"max_workspace_mb"`
	// MaxCommandsMB bounds one sandbox's commands.jsonl (default 64).
	MaxCommandsMB int64 `toml:"max_commands_mb"`
}

// Approval configures held ("ask") requests.
type Approval struct {
	// Timeout is how long a request is held before it is denied.
	Timeout Duration `toml:"timeout"`
}

// Duration is a time.Duration written as a Go duration string ("90s"),
// optionally led by whole days ("7d", "1d12h"), as `airlock logs --since`
// reads them.
type Duration struct{ time.Duration }

// maxDays bounds the days of a Duration (about 273 years; time.Duration
// holds 292).
const maxDays = 100000

// UnmarshalText parses a duration; negative durations are errors.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := parseDuration(string(b))
	if err != nil {
		return fmt.Errorf("not a duration (use e.g. \"30s\", \"5m\", \"1h\", \"7d\"): %q", b)
	}
	if v < 0 {
		return fmt.Errorf("duration must not be negative: %q", b)
	}
	d.Duration = v
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	days, rest, hasDays := strings.Cut(s, "d")
	if !hasDays {
		return time.ParseDuration(s)
	}
	n, err := strconv.Atoi(days)
	if err != nil || n < 0 || n > maxDays || days[0] == '+' {
		return 0, fmt.Errorf("bad day count %q", days)
	}
	v := time.Duration(n) * 24 * time.Hour
	if rest == "" {
		return v, nil
	}
	r, err := time.ParseDuration(rest)
	if err != nil || r < 0 || r > math.MaxInt64-v {
		return 0, fmt.Errorf("bad duration after the days: %q", rest)
	}
	return v + r, nil
}

// MarshalText writes the duration back as a string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Resolver is a DNS server address, "addr" or "addr:port" (port 53 when
// none is given).
type Resolver struct{ netip.AddrPort }

// UnmarshalText parses "198.18.0.53" or "198.18.0.53:5353".
func (r *Resolver) UnmarshalText(b []byte) error {
	if a, err := netip.ParseAddr(string(b)); err == nil {
		r.AddrPort = netip.AddrPortFrom(a, 53)
		return nil
	}
	ap, err := netip.ParseAddrPort(string(b))
	if err != nil {
		return fmt.Errorf("not an address or address:port: %q", b)
	}
	r.AddrPort = ap
	return nil
}

// MarshalText writes addr:port.
func (r Resolver) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Default values, also documented in docs/config.md.
const (
	DefaultStateDir      = "/var/lib/airlock"
	DefaultPolicyDir     = "/etc/airlock/policies"
	DefaultRuntimeDir    = "/run/airlock"
	DefaultSocket        = "/run/airlock/airlock.sock"
	DefaultGroup         = "airlock"
	DefaultPodmanUser    = "airlock-sandbox"
	DefaultProxyPort     = 15001
	DefaultExplicitPort  = 3128
	DefaultDNSPort       = 53
	DefaultImage         = "localhost/airlock/busybox:1"
	DefaultExecTimeout   = 10 * time.Minute
	DefaultLifetime      = 4 * time.Hour
	DefaultMaxSandboxes  = 64
	DefaultApprovalLimit = 2 * time.Minute
)

// ErrNoConfig is returned by Load when the file does not exist; it is
// distinct from a config that exists and is invalid.
var ErrNoConfig = errors.New("no config file")

// Load reads, decodes and validates the appliance config at path. Every
// problem is reported at once, each with file:line:col (see Errors).
func Load(path string) (*Config, error) {
	src, err := safefile.Read(path, MaxConfigFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoConfig, path)
	}
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, src)
}

// Parse decodes and validates a config held in memory; name is used in
// error positions.
func Parse(name string, src []byte) (*Config, error) {
	var c Config
	errs, failed, ok := decodeStrict(name, src, &c)
	if !ok {
		return nil, errs
	}
	c.File = name
	c.applyDefaults()
	for _, e := range c.validate(newLocator(name, src)) {
		if !failed[e.Key] { // already reported: its value did not decode
			errs = append(errs, e)
		}
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
	if len(errs) > 0 {
		return nil, errs
	}
	return &c, nil
}

func (c *Config) applyDefaults() {
	setStr(&c.StateDir, DefaultStateDir)
	setStr(&c.PolicyDir, DefaultPolicyDir)
	setStr(&c.RuntimeDir, DefaultRuntimeDir)
	setStr(&c.Control.Socket, DefaultSocket)
	setStr(&c.Control.Group, DefaultGroup)
	setStr(&c.Podman.User, DefaultPodmanUser)
	setStr(&c.Sandbox.Image, DefaultImage)
	setPort(&c.Listen.ProxyTransparent, DefaultProxyPort)
	setPort(&c.Listen.ProxyExplicit, DefaultExplicitPort)
	setPort(&c.Listen.DNS, DefaultDNSPort)
	setDur(&c.Sandbox.ExecTimeout, DefaultExecTimeout)
	setDur(&c.Sandbox.Lifetime, DefaultLifetime)
	setDur(&c.Approval.Timeout, DefaultApprovalLimit)
	if c.Sandbox.Max == 0 {
		c.Sandbox.Max = DefaultMaxSandboxes
	}
	if c.Audit.Store == "" && filepath.IsAbs(c.StateDir) {
		c.Audit.Store = filepath.Join(c.StateDir, "audit.db")
	}
	if c.Audit.Node == "" {
		c.Audit.Node, _ = os.Hostname()
	}
	setStr((*string)(&c.Audit.JSONLFormat), string(audit.FormatAirlock))
}

func setStr(p *string, v string) {
	if *p == "" {
		*p = v
	}
}

func setPort(p *uint16, v uint16) {
	if *p == 0 {
		*p = v
	}
}

func setDur(p *Duration, v time.Duration) {
	if p.Duration == 0 {
		p.Duration = v
	}
}
