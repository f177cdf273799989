// Package preview is ingress to a sandbox's web app: a preview names one
// sandbox port, who may open it and until when, and is served on the
// appliance's preview listener at https://ID.HOST/. Requests are
// authenticated by a one-time link token exchanged for a cookie scoped to
// that preview's host, or by a principal's bearer token; the upstream
// connection is opened by a Dialer (serve: from inside the sandbox's
// network namespace to its loopback), never through the sandbox's veth.
// Every preview's life and every request through it is an audit event.
package preview

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"sync"
	"time"

	"airlock/audit"
)

// Preview is one exposed port.
type Preview struct {
	ID      string    `json:"id"`
	Sandbox string    `json:"sandbox"`
	Port    uint16    `json:"port"`
	Name    string    `json:"name,omitempty"`
	To      []string  `json:"to"` // the principals who may open it
	By      string    `json:"by"` // the principal who exposed it
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
	URL     string    `json:"url"` // without a token
}

// Dialer opens a connection to port on the loopback of sandbox's network
// namespace.
type Dialer func(ctx context.Context, sandbox string, port uint16) (net.Conn, error)

// Principal is a bearer token's owner, as the Authenticate hook knows it.
type Principal struct {
	Name  string
	Admin bool
}

// Config configures a Manager. Host, Key and Dial are required.
type Config struct {
	Host string // previews are ID.Host
	Port int    // the listener's port in URLs; 0 or 443: none
	Key  []byte // HMAC key of link tokens and cookies (>= 32 bytes)
	Dial Dialer
	// Authenticate maps a bearer token to its principal; nil: no bearer
	// tokens are accepted.
	Authenticate func(token string) (Principal, bool)
	Events       audit.Emitter // nil: discarded
	Log          *slog.Logger
	DefaultTTL   time.Duration // 0: 30m
	MaxTTL       time.Duration // 0: 24h
	LinkTTL      time.Duration // how long a link token is good for; 0: 15m
	Rate         float64       // requests per second per preview; 0: 100
	Burst        int           // 0: 200
	// StrayRate and StrayBurst bound, per client (IPv4 address or IPv6
	// /64), requests whose host names no live preview; 0: 10/s, 50.
	StrayRate  float64
	StrayBurst int
	// StrayClients is how many clients are tracked one by one; the rest
	// share one limit and one record. 0: 1024.
	StrayClients int
	// FloodInterval is how often the records of refused floods are
	// written as one per source (ingress.count); 0: 10s.
	FloodInterval time.Duration
	Now           func() time.Time
}

// Errors of Create and Revoke.
var (
	ErrNotFound = errors.New("no such preview")
	ErrBadPort  = errors.New("port must be 1-65535")
	ErrBadTTL   = errors.New("ttl out of range")
)

var idRE = regexp.MustCompile(`^pv[0-9a-f]{16}$`)

// Manager holds the previews and serves them (ServeHTTP).
type Manager struct {
	cfg Config

	mu    sync.Mutex
	live  map[string]*entry
	ended map[string]endedRecord // id → why, kept until its expiry + 1h
	used  map[string]time.Time   // link-token nonces spent → their expiry

	strays  *strays   // clients of requests that named no live preview
	flushed time.Time // when flood records were last written (Run's goroutine)
}

type endedRecord struct {
	reason string
	until  time.Time
}

// New validates cfg and returns a Manager; call Run to expire previews.
func New(cfg Config) (*Manager, error) {
	if cfg.Host == "" || cfg.Dial == nil {
		return nil, errors.New("preview: host and dialer are required")
	}
	if len(cfg.Key) < 32 {
		return nil, fmt.Errorf("preview: key of %d bytes, need at least 32", len(cfg.Key))
	}
	def(&cfg.DefaultTTL, 30*time.Minute)
	def(&cfg.MaxTTL, 24*time.Hour)
	def(&cfg.LinkTTL, 15*time.Minute)
	if cfg.Rate == 0 {
		cfg.Rate = 100
	}
	if cfg.Burst == 0 {
		cfg.Burst = 200
	}
	if cfg.StrayRate == 0 {
		cfg.StrayRate = 10
	}
	if cfg.StrayBurst == 0 {
		cfg.StrayBurst = 50
	}
	if cfg.StrayClients == 0 {
		cfg.StrayClients = 1024
	}
	def(&cfg.FloodInterval, 10*time.Second)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Events == nil {
		cfg.Events = audit.Discard
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Manager{cfg: cfg, live: map[string]*entry{}, ended: map[string]endedRecord{}, used: map[string]time.Time{},
		strays: newStrays(cfg.StrayRate, cfg.StrayBurst, cfg.StrayClients), flushed: cfg.Now()}, nil
}

func def(d *time.Duration, v time.Duration) {
	if *d == 0 {
		*d = v
	}
}

// CreateRequest is what Create needs.
type CreateRequest struct {
	Sandbox string
	Port    int
	TTL     time.Duration // 0: the default
	To      []string      // empty: By alone
	Name    string
	By      string
}

// Links are one-time URLs per principal of a new preview.
type Links map[string]string

// Create exposes a port and returns the preview and a link per principal.
func (m *Manager) Create(req CreateRequest) (Preview, Links, error) {
	if req.Port < 1 || req.Port > 65535 {
		return Preview{}, nil, fmt.Errorf("preview: port %d: %w", req.Port, ErrBadPort)
	}
	ttl := req.TTL
	if ttl == 0 {
		ttl = m.cfg.DefaultTTL
	}
	if ttl < time.Second || ttl > m.cfg.MaxTTL {
		return Preview{}, nil, fmt.Errorf("preview: ttl %s: %w (1s to %s)", ttl, ErrBadTTL, m.cfg.MaxTTL)
	}
	to := slices.Clone(req.To)
	if len(to) == 0 {
		to = []string{req.By}
	}
	now := m.cfg.Now()
	p := Preview{ID: "pv" + nonce()[:16], Sandbox: req.Sandbox, Port: uint16(req.Port), Name: req.Name,
		To: to, By: req.By, Created: now.UTC(), Expires: now.Add(ttl).UTC()}
	p.URL = m.baseURL(p.ID) + "/"
	m.mu.Lock()
	m.live[p.ID] = newEntry(p, m)
	m.mu.Unlock()
	m.event(p, "created", "", fmt.Sprintf("port %d for %v until %s", p.Port, p.To, p.Expires.Format(time.RFC3339)))
	links := Links{}
	for _, who := range to {
		links[who] = m.link(p, who)
	}
	return p, links, nil
}

// Link mints a fresh one-time link of a live preview for a principal it
// names.
func (m *Manager) Link(sandbox, id, principal string) (string, error) {
	e := m.get(id)
	if e == nil || e.p.Sandbox != sandbox {
		return "", fmt.Errorf("preview %s of sandbox %s: %w", id, sandbox, ErrNotFound)
	}
	if !slices.Contains(e.p.To, principal) {
		return "", fmt.Errorf("preview %s is not for %q", id, principal)
	}
	return m.link(e.p, principal), nil
}

func (m *Manager) link(p Preview, who string) string {
	exp := earlier(p.Expires, m.cfg.Now().Add(m.cfg.LinkTTL))
	tok := sign(m.cfg.Key, claim{Kind: kindLink, Preview: p.ID, Principal: who, Expires: exp, Nonce: nonce()})
	return p.URL + "?" + tokenParam + "=" + tok
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (m *Manager) baseURL(id string) string {
	if m.cfg.Port == 0 || m.cfg.Port == 443 {
		return "https://" + id + "." + m.cfg.Host
	}
	return fmt.Sprintf("https://%s.%s:%d", id, m.cfg.Host, m.cfg.Port)
}

// List returns the live previews of sandbox ("" = all), oldest first.
func (m *Manager) List(sandbox string) []Preview {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Preview
	for _, e := range m.live {
		if sandbox == "" || e.p.Sandbox == sandbox {
			out = append(out, e.p)
		}
	}
	slices.SortFunc(out, func(a, b Preview) int { return a.Created.Compare(b.Created) })
	return out
}

// Revoke ends a preview of sandbox now.
func (m *Manager) Revoke(sandbox, id, by string) error {
	e := m.get(id)
	if e == nil || e.p.Sandbox != sandbox {
		return fmt.Errorf("preview %s of sandbox %s: %w", id, sandbox, ErrNotFound)
	}
	m.end(e, "revoked", "revoked by "+by)
	return nil
}

// SandboxEnded ends every preview of a sandbox that is gone.
func (m *Manager) SandboxEnded(sandbox string) {
	for _, p := range m.List(sandbox) {
		if e := m.get(p.ID); e != nil {
			m.end(e, "expired", "sandbox "+sandbox+" ended")
		}
	}
}

func (m *Manager) get(id string) *entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live[id]
}

// end removes a live preview, closes its connections and records why.
func (m *Manager) end(e *entry, stage, reason string) {
	m.mu.Lock()
	if m.live[e.p.ID] != e {
		m.mu.Unlock()
		return
	}
	delete(m.live, e.p.ID)
	m.ended[e.p.ID] = endedRecord{reason: stage + ": " + reason, until: m.cfg.Now().Add(time.Hour)}
	m.mu.Unlock()
	n := e.close()
	if ev, ok := e.flush(m.cfg.Now()); ok {
		m.cfg.Events.Emit(ev)
	}
	m.event(e.p, stage, "", fmt.Sprintf("%s; %d connections closed", reason, n))
}

// Run expires previews and forgets spent nonces until ctx ends; alive,
// when set, says whether a sandbox still exists (its previews end with it).
func (m *Manager) Run(ctx context.Context, alive func(sandbox string) bool) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			m.closeAll()
			return
		case <-t.C:
			m.sweep(alive)
		}
	}
}

func (m *Manager) sweep(alive func(string) bool) {
	now := m.cfg.Now()
	flood := now.Sub(m.flushed) >= m.cfg.FloodInterval
	var expired, gone, live []*entry
	m.mu.Lock()
	for _, e := range m.live {
		if flood {
			live = append(live, e)
		}
		switch {
		case !now.Before(e.p.Expires):
			expired = append(expired, e)
		case alive != nil && !alive(e.p.Sandbox):
			gone = append(gone, e)
		}
	}
	for n, exp := range m.used {
		if now.After(exp) {
			delete(m.used, n)
		}
	}
	for id, r := range m.ended {
		if now.After(r.until) {
			delete(m.ended, id)
		}
	}
	m.mu.Unlock()
	for _, e := range expired {
		m.end(e, "expired", "ttl reached")
	}
	for _, e := range gone {
		m.end(e, "expired", "sandbox "+e.p.Sandbox+" ended")
	}
	if flood {
		m.flushed = now
		m.flushFloods(now, live)
	}
}

// flushFloods writes the aggregated records of the interval that ends.
func (m *Manager) flushFloods(now time.Time, live []*entry) {
	evs := m.strays.flush(now)
	for _, e := range live {
		if ev, ok := e.flush(now); ok {
			evs = append(evs, ev)
		}
	}
	for _, ev := range evs {
		m.cfg.Events.Emit(ev)
	}
}

func (m *Manager) closeAll() {
	m.mu.Lock()
	es := make([]*entry, 0, len(m.live))
	for _, e := range m.live {
		es = append(es, e)
	}
	m.mu.Unlock()
	for _, e := range es {
		e.close()
	}
}

// spend marks a link token's nonce used; false if it already was.
func (m *Manager) spend(c claim) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.used[c.Nonce]; ok {
		return false
	}
	m.used[c.Nonce] = c.Expires
	return true
}

// event records a preview's life: created, opened, refused, expired,
// revoked.
func (m *Manager) event(p Preview, stage, principal, reason string) {
	e := audit.New(audit.KindPreview, p.Sandbox)
	e.ID = p.ID
	e.Reason = reason
	if stage == "refused" {
		e.Verdict = "deny"
	}
	e.Preview = &audit.Preview{Stage: stage, Port: int(p.Port), Name: p.Name, Principal: principal, By: p.By, Expires: p.Expires.Format(time.RFC3339)}
	m.cfg.Events.Emit(e)
	m.cfg.Log.Info("preview", "stage", stage, "preview", p.ID, "sandbox", p.Sandbox, "principal", principal, "reason", reason)
}
