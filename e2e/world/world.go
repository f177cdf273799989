// Package world is the hermetic "internet" of Airlock's end-to-end tests: a
// network namespace of its own, addressed from 198.18.0.0/15 (and
// 2001:2::/48 for IPv6), reached from the host through one veth pair, that
// serves authoritative DNS for the .test zone and HTTPS sites signed by a
// test CA of its own — an npm registry, a Python simple index, a git
// smart-HTTP server, an internal API, a webhook receiver, an "evil" server
// and a canary — and records everything that reaches it, so a test can
// assert on what did and, above all, what did not arrive.
//
// The servers run in this process: every socket is created on a thread
// locked into the world namespace (a socket keeps the namespace it was
// created in), then served by ordinary goroutines. That keeps the records
// in memory where tests read them, with no IPC, and Close has one process
// to clean up. Start needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN).
package world

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Role names one kind of world server.
type Role string

// The world's servers.
const (
	RoleDNS    Role = "dns"    // authoritative DNS for the .test zone (UDP and TCP 53)
	RoleNPM    Role = "npm"    // a static npm registry
	RolePyPI   Role = "pypi"   // a Python simple index with wheels
	RoleGit    Role = "git"    // git smart-HTTP (git http-backend), pushes enabled
	RoleAPI    Role = "api"    // an internal API that records the headers it receives
	RoleHooks  Role = "hooks"  // a webhook receiver
	RoleEvil   Role = "evil"   // a server nothing should reach (HTTPS, HTTP, DoT, DoH)
	RoleCanary Role = "canary" // records any packet that reaches its addresses
)

// Roles lists every role, in address order.
var Roles = []Role{RoleDNS, RoleNPM, RolePyPI, RoleGit, RoleAPI, RoleHooks, RoleEvil, RoleCanary}

// hostOctet is each role's last octet inside the world's /24.
var hostOctet = map[Role]byte{
	RoleDNS: 53, RoleNPM: 10, RolePyPI: 11, RoleGit: 12, RoleAPI: 13,
	RoleHooks: 14, RoleEvil: 66, RoleCanary: 99,
}

// DefaultNames are the DNS names of each role unless Options overrides
// them. The first name of a role is its canonical one (its URL).
var DefaultNames = map[Role][]string{
	RoleDNS:    {"ns.world.test"},
	RoleNPM:    {"registry.example.test"},
	RolePyPI:   {"pypi.pkg.example.test"},
	RoleGit:    {"git.example.test"},
	RoleAPI:    {"api.staging.example.test"},
	RoleHooks:  {"hooks.example.test"},
	RoleEvil:   {"evil.test", "doh.evil.test", "dot.evil.test", "evil.example.test"},
	RoleCanary: {"canary.test", "canary.example.test"},
}

// RebindNames are names the world's DNS answers with addresses no sandbox
// may reach. They sit under pkg.example.test, a wildcard the test policies
// allow, so only the appliance's rebinding guard stands in their way.
var RebindNames = map[string]netip.Addr{
	"rebind-loopback.pkg.example.test": netip.MustParseAddr("127.0.0.1"),
	"rebind-private.pkg.example.test":  netip.MustParseAddr("10.20.30.40"),
	"rebind-metadata.pkg.example.test": netip.MustParseAddr("169.254.169.254"),
	"rebind-cgnat.pkg.example.test":    netip.MustParseAddr("100.64.1.2"),
	"rebind-v6loop.pkg.example.test":   netip.MustParseAddr("::1"),
	"rebind-mapped.pkg.example.test":   netip.MustParseAddr("::ffff:127.0.0.1"),
	"rebind-zero.pkg.example.test":     netip.MustParseAddr("0.0.0.0"),
}

// WildcardZones are zones whose every other name the world's DNS answers
// with the evil server's addresses: a name the appliance should never have
// resolved (an exfiltration label, a suffix trick, a deny-listed name)
// leads to a server that records it.
var WildcardZones = []string{"example.test", "evil.test"}

// ExfilZone is a zone for exfiltration attempts (covered by a wildcard).
const ExfilZone = "exfil.evil.test"

// Options configures Start. The zero value is a complete world.
type Options struct {
	// Names overrides DefaultNames per role.
	Names map[Role][]string
	// Extra adds A/AAAA records to the zone (name → addresses), e.g. a
	// name pointing at the appliance's gateway.
	Extra map[string][]netip.Addr
	// APIToken is the credential the internal API expects in
	// "Authorization: Bearer <token>"; random when empty.
	APIToken string
	// Dir holds the CA, the git repository and the package files; a new
	// temporary directory (removed on Close) when empty.
	Dir string
	// Logger receives the world's diagnostics; discarded when nil.
	Logger *slog.Logger
}

// World is a running hermetic world. Its methods are safe for concurrent
// use. Close it, pass or fail.
type World struct {
	// ID is the random suffix of the namespace and veth names.
	ID string
	// NetNS is the world's network namespace name (under /run/netns).
	NetNS string
	// HostLink is the host end of the veth pair; HostAddr and HostAddr6
	// are its addresses. The appliance reaches the world from there.
	HostLink  string
	HostAddr  netip.Addr
	HostAddr6 netip.Addr
	// Prefix and Prefix6 are the world's networks (routed on the host
	// through HostLink).
	Prefix  netip.Prefix
	Prefix6 netip.Prefix
	// CAPEM is the test CA certificate; CAFile is the same written to disk.
	CAPEM  []byte
	CAFile string
	// APIToken is the credential the internal API accepts.
	APIToken string
	// Dir is the world's file directory.
	Dir string

	// GitHead is the commit the git repository's main branch points at.
	GitHead string

	names  map[Role][]string
	extra  map[string][]netip.Addr
	caPool *x509.CertPool
	addrs  map[Role]netip.Addr
	addrs6 map[Role]netip.Addr
	log    *Log
	logger *slog.Logger
	ns     *namespace
	// worldLink and worldIndex are the world's end of the veth.
	worldLink  string
	worldIndex int
	closers    []io.Closer
	tmpDir     bool
	wg         sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// Start creates the world's namespace and starts every server in it. On
// error everything already made is removed.
func Start(ctx context.Context, opts Options) (w *World, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("world: start: needs root (network namespaces)")
	}
	w, err = newWorld(opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.Close()
			w = nil
		}
	}()
	if err := w.makeNetwork(ctx); err != nil {
		return nil, err
	}
	if err := w.startServers(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

func newWorld(opts Options) (*World, error) {
	id, err := randomHex(3)
	if err != nil {
		return nil, err
	}
	w := &World{
		ID:       id,
		NetNS:    "airlock-world-" + id,
		HostLink: "alw" + id + "h",
		APIToken: opts.APIToken,
		Dir:      opts.Dir,
		names:    make(map[Role][]string),
		addrs:    make(map[Role]netip.Addr),
		addrs6:   make(map[Role]netip.Addr),
		log:      newLog(),
		logger:   opts.Logger,
	}
	if w.logger == nil {
		w.logger = slog.New(slog.DiscardHandler)
	}
	if w.APIToken == "" {
		tok, err := randomHex(16)
		if err != nil {
			return nil, err
		}
		w.APIToken = "world-api-" + tok
	}
	for _, r := range Roles {
		w.names[r] = DefaultNames[r]
		if n, ok := opts.Names[r]; ok && len(n) > 0 {
			w.names[r] = normalizeNames(n)
		}
	}
	if err := w.makeDir(); err != nil {
		return nil, err
	}
	w.extra = opts.Extra
	return w, nil
}

func (w *World) makeDir() error {
	if w.Dir != "" {
		return os.MkdirAll(w.Dir, 0o755)
	}
	d, err := os.MkdirTemp("", "airlock-world-")
	if err != nil {
		return fmt.Errorf("world: %w", err)
	}
	// The sandbox user and git's CGI need to read it.
	if err := os.Chmod(d, 0o755); err != nil {
		return fmt.Errorf("world: %w", err)
	}
	w.Dir, w.tmpDir = d, true
	return nil
}

func normalizeNames(in []string) []string {
	out := make([]string, 0, len(in))
	for _, n := range in {
		out = append(out, strings.TrimSuffix(strings.ToLower(n), "."))
	}
	return out
}

// Close stops every server and removes the namespace, the veth pair and
// (when Start made it) the directory. It is safe to call more than once
// and after a partial Start.
func (w *World) Close() error {
	w.closeOnce.Do(func() {
		var errs []error
		for i := len(w.closers) - 1; i >= 0; i-- {
			if err := w.closers[i].Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
		w.wg.Wait()
		if w.ns != nil {
			errs = append(errs, w.ns.remove())
		}
		if w.tmpDir {
			errs = append(errs, os.RemoveAll(w.Dir))
		}
		w.closeErr = errors.Join(errs...)
	})
	return w.closeErr
}

func (w *World) addCloser(c io.Closer) { w.closers = append(w.closers, c) }

// Names returns the DNS names of a role; the first is canonical.
func (w *World) Names(r Role) []string { return append([]string(nil), w.names[r]...) }

// Name returns the canonical DNS name of a role.
func (w *World) Name(r Role) string { return w.names[r][0] }

// Addr returns a role's IPv4 address.
func (w *World) Addr(r Role) netip.Addr { return w.addrs[r] }

// Addr6 returns a role's IPv6 address (invalid when the host has no IPv6).
func (w *World) Addr6(r Role) netip.Addr { return w.addrs6[r] }

// DNSAddr is the world's DNS server, the appliance's upstream resolver.
func (w *World) DNSAddr() netip.AddrPort { return netip.AddrPortFrom(w.addrs[RoleDNS], 53) }

// URL returns https://<canonical name of r> (no trailing slash).
func (w *World) URL(r Role) string { return "https://" + w.Name(r) }

// Resolve answers what the world's zone holds for name (A and AAAA), the
// way the world's DNS would; ok is false for a name outside it.
func (w *World) Resolve(name string) ([]netip.Addr, bool) {
	z := w.zone()
	a, ok := z.lookup(name)
	return a, ok
}

// Hosts returns "name addr" pairs for every name in the zone (IPv4 only),
// sorted; handy for curl --resolve and git http.curloptResolve.
func (w *World) Hosts() map[string]netip.Addr {
	out := make(map[string]netip.Addr)
	for _, r := range Roles {
		for _, n := range w.names[r] {
			out[n] = w.addrs[r]
		}
	}
	return out
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("world: random: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func (w *World) path(elem ...string) string {
	return filepath.Join(append([]string{w.Dir}, elem...)...)
}
