package serve

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"airlock/internal/safefile"
)

// Scopes a principal may hold (docs/api.md, "Principals and scopes").
const (
	ScopeCreate  = "sandbox:create" // create, remove, pause, resume, snapshot, reset its sandboxes
	ScopeExec    = "sandbox:exec"   // run commands, manage processes, ask for access
	ScopeFiles   = "files"          // copy and read/write files, diffs, artifacts
	ScopeAttach  = "attach"         // attach to a running process, terminal execs
	ScopeApprove = "approve"        // list and decide held requests of its sandboxes
	ScopeLogs    = "logs:read"      // events, summaries and reports of its sandboxes
	ScopeAdmin   = "admin"          // everything, every principal's sandboxes
)

// AllScopes lists the scopes in the order the docs give them.
var AllScopes = []string{ScopeCreate, ScopeExec, ScopeFiles, ScopeAttach, ScopeApprove, ScopeLogs, ScopeAdmin}

// Reserved principal names: the unix socket's caller and the principal of
// control.token_file.
const (
	LocalPrincipal = "local"
	TokenPrincipal = "token"
)

// maxPrincipalsFile caps control.principals_file.
const maxPrincipalsFile = 1 << 20

// Principal is one caller of the control API: who it is, what it may do
// and how much of the appliance it may use.
type Principal struct {
	Name   string
	Scopes []string
	Quota  Quota
	hash   [sha256.Size]byte
}

// Quota bounds a principal's use of the appliance; zero values and empty
// lists mean no bound beyond the appliance's own (sandbox.max, ...).
type Quota struct {
	Sandboxes      int      `toml:"sandboxes"`        // at once
	MaxLifetime    Duration `toml:"max_lifetime"`     // of each sandbox
	MaxExecTimeout Duration `toml:"max_exec_timeout"` // of each command
	Policies       []string `toml:"policies"`         // allowed policy names
	Images         []string `toml:"images"`           // allowed images (exact references)
}

// Has reports whether p holds scope (admin holds every scope).
func (p *Principal) Has(scope string) bool {
	return scope == "" || slices.Contains(p.Scopes, ScopeAdmin) || slices.Contains(p.Scopes, scope)
}

// Admin reports whether p sees and touches every principal's sandboxes.
func (p *Principal) Admin() bool { return slices.Contains(p.Scopes, ScopeAdmin) }

// Principals is one version of the principals file: immutable once built.
type Principals struct {
	list []*Principal
}

// Lookup returns the principal whose token hashes to the stored hash. It
// compares against every principal in constant time per entry, so the time
// it takes says nothing about which hash matched or how much of it.
func (ps *Principals) Lookup(token string) (*Principal, bool) {
	if ps == nil || token == "" {
		return nil, false
	}
	sum := sha256.Sum256([]byte(token))
	var found *Principal
	for _, p := range ps.list {
		if subtle.ConstantTimeCompare(sum[:], p.hash[:]) == 1 {
			found = p
		}
	}
	return found, found != nil
}

// Names lists the principals' names, sorted.
func (ps *Principals) Names() []string {
	var out []string
	for _, p := range ps.list {
		out = append(out, p.Name)
	}
	sort.Strings(out)
	return out
}

// Get returns the principal named name.
func (ps *Principals) Get(name string) (*Principal, bool) {
	if ps == nil {
		return nil, false
	}
	for _, p := range ps.list {
		if p.Name == name {
			return p, true
		}
	}
	return nil, false
}

// NewToken returns a fresh random bearer token and the hex SHA-256 that a
// principals file stores for it.
func NewToken() (token, hash string) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	token = "alk_" + base64.RawURLEncoding.EncodeToString(b[:])
	return token, TokenHash(token)
}

// TokenHash is the hex SHA-256 of a token, as token_sha256 holds it.
// Tokens are 32 random bytes, so a fast hash is enough: nothing to guess.
func TokenHash(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

// PrincipalsFile is the TOML form of control.principals_file.
type PrincipalsFile struct {
	Version    int                       `toml:"version"`
	Principals map[string]PrincipalEntry `toml:"principals"`
}

// PrincipalEntry is one [principals.NAME] table.
type PrincipalEntry struct {
	TokenSHA256 string   `toml:"token_sha256"`
	Scopes      []string `toml:"scopes"`
	Quota       Quota    `toml:"quota"`
}

var principalName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// LoadPrincipals reads and validates a principals file (mode 0600 or
// stricter). Every problem is reported, each with file:line:col.
func LoadPrincipals(path string) (*Principals, error) {
	src, err := safefile.ReadPrivate(path, maxPrincipalsFile)
	if err != nil {
		return nil, fmt.Errorf("control.principals_file: %w", err)
	}
	return parsePrincipals(path, src)
}

// parsePrincipals decodes and validates a principals file held in memory.
func parsePrincipals(name string, src []byte) (*Principals, error) {
	f, errs := DecodePrincipals(name, src)
	if len(errs) > 0 {
		return nil, errs
	}
	return f.build(), nil
}

// DecodePrincipals decodes and validates src, returning the file and
// every problem found (the CLI edits the file through it).
func DecodePrincipals(name string, src []byte) (*PrincipalsFile, Errors) {
	var f PrincipalsFile
	errs, failed, ok := decodeStrict(name, src, &f)
	if !ok {
		return nil, errs
	}
	loc := newLocator(name, src)
	if f.Version != 1 && !failed["version"] {
		errs = append(errs, loc.errorf(toml.Key{"version"}, "version = 1 is required (got %d)", f.Version))
	}
	for _, e := range f.validate(loc) {
		if !failed[e.Key] { // already reported: its value did not decode
			errs = append(errs, e)
		}
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
	return &f, errs
}

func (f *PrincipalsFile) validate(loc locator) Errors {
	var errs Errors
	seen := map[string]string{}
	for _, name := range principalNames(f.Principals) {
		e := f.Principals[name]
		add := func(sub string, format string, args ...any) {
			key := toml.Key{"principals", name}
			if sub != "" {
				if k := append(key, strings.Split(sub, ".")...); hasLine(loc, k) {
					key = k // else: a missing key, reported at its table
				}
			}
			errs = append(errs, loc.errorf(key, "principals.%s: %s", name, fmt.Sprintf(format, args...)))
		}
		switch {
		case !principalName.MatchString(name):
			add("", "a name is 1-64 of a-z 0-9 _ - (starting with a letter or digit)")
		case name == LocalPrincipal || name == TokenPrincipal:
			add("", "the name %q is reserved (%s)", name, map[string]string{LocalPrincipal: "the unix socket's caller",
				TokenPrincipal: "control.token_file's principal"}[name])
		}
		h, err := hex.DecodeString(e.TokenSHA256)
		if err != nil || len(h) != sha256.Size {
			add("token_sha256", "token_sha256 must be 64 hex digits (the SHA-256 of the token; `airlock principal add` writes it)")
		} else if other, dup := seen[strings.ToLower(e.TokenSHA256)]; dup {
			add("token_sha256", "token_sha256 is the same as principals.%s's: give each principal its own token", other)
		} else {
			seen[strings.ToLower(e.TokenSHA256)] = name
		}
		if len(e.Scopes) == 0 {
			add("scopes", "scopes is required: some of %s", strings.Join(AllScopes, ", "))
		}
		for i, s := range e.Scopes {
			if !slices.Contains(AllScopes, s) {
				add("scopes", "scopes[%d]: unknown scope %q (want one of %s)", i, s, strings.Join(AllScopes, ", "))
			}
		}
		if e.Quota.Sandboxes < 0 {
			add("quota.sandboxes", "quota.sandboxes must not be negative")
		}
	}
	return errs
}

func hasLine(loc locator, key toml.Key) bool {
	line, _ := loc.find(key)
	return line > 0
}

func (f *PrincipalsFile) build() *Principals {
	ps := &Principals{}
	for _, name := range principalNames(f.Principals) {
		e := f.Principals[name]
		p := &Principal{Name: name, Scopes: slices.Clone(e.Scopes), Quota: e.Quota}
		h, _ := hex.DecodeString(e.TokenSHA256)
		copy(p.hash[:], h)
		ps.list = append(ps.list, p)
	}
	return ps
}

// withToken adds control.token_file's token as the admin principal "token".
func (ps *Principals) withToken(token string) *Principals {
	if token == "" {
		return ps
	}
	out := &Principals{}
	if ps != nil {
		out.list = slices.Clone(ps.list)
	}
	out.list = append(out.list, &Principal{Name: TokenPrincipal, Scopes: []string{ScopeAdmin},
		hash: sha256.Sum256([]byte(token))})
	return out
}

// localPrincipal is the unix socket's caller: an admin (the socket's file
// mode is its access control).
var localPrincipal = &Principal{Name: LocalPrincipal, Scopes: []string{ScopeAdmin}}

func principalNames(m map[string]PrincipalEntry) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
