package preview

import (
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strings"
	"time"
)

const (
	tokenParam = "airlock_preview_token"
	cookieName = "airlock_preview"
)

var errEnded = errors.New("preview ended")

// fate says how a request's ingress record is written.
type fate int

const (
	fateOwn       fate = iota // a record of its own, at once
	fateStray                 // named no live preview: aggregated per client
	fateThrottled             // over its preview's rate limit: aggregated per preview
)

// routing is where a request goes.
type routing struct {
	e    *entry // the live preview its host names, if any
	who  string // the principal admitted
	pass bool   // proxy it to the sandbox port (else it was answered here)
	fate fate
}

// ServeHTTP serves the preview listener: find the preview by host,
// authenticate, then proxy to the sandbox port.
func (m *Manager) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := m.cfg.Now()
	rec := &recorder{ResponseWriter: w}
	r.Body = &countingBody{ReadCloser: r.Body, n: &rec.up}
	rt := m.route(rec, r)
	if rt.pass {
		rt.e.proxy.ServeHTTP(rec, withEntry(r, rt.e, rt.who))
	}
	m.ingress(r, rt, rec, m.cfg.Now().Sub(start))
}

// route answers everything but a request to proxy.
func (m *Manager) route(w http.ResponseWriter, r *http.Request) routing {
	id, err := m.previewID(r.Host)
	if r.Method == http.MethodConnect || !strings.HasPrefix(r.RequestURI, "/") {
		err = errNotOrigin
	}
	var e *entry
	if err == nil {
		e = m.get(id)
	}
	if e == nil {
		m.stray(w, r, id, err)
		return routing{fate: fateStray}
	}
	if !e.limit.Allow() {
		w.Header().Set("Retry-After", "1")
		page(w, http.StatusTooManyRequests, "Too many requests", "This preview's rate limit was reached; try again shortly.")
		return routing{e: e, fate: fateThrottled}
	}
	who, ok := m.authenticate(w, r, e)
	if !ok {
		return routing{e: e}
	}
	return routing{e: e, who: who, pass: true}
}

var errNotOrigin = errors.New("only origin-form requests are served here (no CONNECT, no absolute URLs)")

// stray answers a request that names no live preview: over its client's
// rate limit 429, else 400 (bad host or form), 404 or 410.
func (m *Manager) stray(w http.ResponseWriter, r *http.Request, id string, err error) {
	switch {
	case !m.strays.allow(clientKey(r.RemoteAddr), m.cfg.Now()):
		w.Header().Set("Retry-After", "1")
		page(w, http.StatusTooManyRequests, "Too many requests", "Too many requests to hosts that name no preview; try again shortly.")
	case err == errNotOrigin:
		page(w, http.StatusBadRequest, "Bad request", "Only origin-form requests are served here (no CONNECT, no absolute URLs).")
	case err != nil:
		page(w, http.StatusBadRequest, "Bad host", err.Error())
	default:
		m.gone(w, id)
	}
}

// previewID is the preview a Host header names: exactly ID.HOST[:port].
func (m *Manager) previewID(host string) (string, error) {
	if len(host) > 255 {
		return "", fmt.Errorf("host name of %d bytes", len(host))
	}
	h := strings.ToLower(host)
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(h, ".")
	label, ok := strings.CutSuffix(h, "."+m.cfg.Host)
	if !ok || h == "" {
		return "", fmt.Errorf("host %q is not a preview of %s", host, m.cfg.Host)
	}
	if !idRE.MatchString(label) {
		return "", fmt.Errorf("host %q: %q is not a preview id", host, label)
	}
	return label, nil
}

// gone answers an unknown (404) or ended (410) preview.
func (m *Manager) gone(w http.ResponseWriter, id string) {
	m.mu.Lock()
	rec, ended := m.ended[id]
	m.mu.Unlock()
	if ended {
		page(w, http.StatusGone, "Preview ended", "Preview "+id+" has ended ("+rec.reason+").")
		return
	}
	page(w, http.StatusNotFound, "No such preview", "There is no preview "+id+".")
}

// authenticate admits a link token (answered here with a cookie and a
// redirect), the preview's cookie, or a bearer token of a principal it
// is for; anything else is answered 401 or 403 and recorded.
func (m *Manager) authenticate(w http.ResponseWriter, r *http.Request, e *entry) (string, bool) {
	now := m.cfg.Now()
	if tok := r.URL.Query().Get(tokenParam); tok != "" {
		m.exchange(w, r, e, tok, now)
		return "", false
	}
	if ck, err := r.Cookie(cookieName); err == nil {
		c, err := verify(m.cfg.Key, ck.Value, kindCookie, e.p.ID, now)
		if err != nil {
			return m.refuse(w, e, "", http.StatusUnauthorized, "cookie: "+err.Error())
		}
		return m.admit(w, e, c.Principal)
	}
	if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && m.cfg.Authenticate != nil {
		p, ok := m.cfg.Authenticate(b)
		if !ok {
			return m.refuse(w, e, "", http.StatusUnauthorized, "bearer token of no principal")
		}
		if p.Admin {
			return p.Name, true
		}
		return m.admit(w, e, p.Name)
	}
	return m.refuse(w, e, "", http.StatusUnauthorized, "no link token, cookie or bearer token")
}

func (m *Manager) admit(w http.ResponseWriter, e *entry, who string) (string, bool) {
	if !slices.Contains(e.p.To, who) {
		return m.refuse(w, e, who, http.StatusForbidden, fmt.Sprintf("principal %q is not among %v", who, e.p.To))
	}
	return who, true
}

// exchange turns a valid, unspent link token into the preview's cookie
// and redirects to the same URL without the token.
func (m *Manager) exchange(w http.ResponseWriter, r *http.Request, e *entry, tok string, now time.Time) {
	c, err := verify(m.cfg.Key, tok, kindLink, e.p.ID, now)
	if err == nil && !m.spend(c) {
		err = errTokenUsed
	}
	if err != nil {
		m.refuse(w, e, c.Principal, http.StatusUnauthorized, "link token: "+err.Error())
		return
	}
	if _, ok := m.admit(w, e, c.Principal); !ok {
		return
	}
	ck := sign(m.cfg.Key, claim{Kind: kindCookie, Preview: e.p.ID, Principal: c.Principal, Expires: e.p.Expires, Nonce: nonce()})
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: ck, Path: "/", Expires: e.p.Expires,
		HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
	q := r.URL.Query()
	q.Del(tokenParam)
	u := *r.URL
	u.RawQuery = q.Encode()
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
	if _, again := e.opened.LoadOrStore(c.Principal, true); !again {
		m.event(e.p, "opened", c.Principal, "link token exchanged for a cookie")
	}
}

// refuse answers 401/403 with a page and records why.
func (m *Manager) refuse(w http.ResponseWriter, e *entry, who string, status int, reason string) (string, bool) {
	m.event(e.p, "refused", who, reason)
	if status == http.StatusForbidden {
		page(w, status, "Not for you", "This preview is not shared with "+who+".")
	} else {
		page(w, status, "Sign-in needed", "Open this preview through the link you were given, or with a bearer token.")
	}
	return who, false
}

// page writes a small HTML answer.
func page(w http.ResponseWriter, status int, title, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	fmt.Fprintf(w, "<!doctype html><title>%s</title><h1>%s</h1><p>%s</p>\n", html.EscapeString(title), html.EscapeString(title), html.EscapeString(msg))
}

// reverseProxy sends a request to the preview's port: Host kept (apps
// build absolute URLs from it), the preview's own credentials removed,
// and cookies the app sets for another domain than its own host dropped.
func (m *Manager) reverseProxy(e *entry) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Transport: e.tr,
		ErrorLog:  slog.NewLogLogger(m.cfg.Log.Handler(), slog.LevelDebug),
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = e.upstream()
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			pr.Out.Header.Set("X-Forwarded-Proto", "https")
			stripCredentials(pr.Out)
		},
		ModifyResponse: func(resp *http.Response) error {
			stripCookies(resp.Header)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if e.isClosed() {
				page(w, http.StatusGone, "Preview ended", "Preview "+e.p.ID+" has ended.")
				return
			}
			m.cfg.Log.Info("preview upstream", "preview", e.p.ID, "port", e.p.Port, "err", err)
			page(w, http.StatusBadGateway, "App not reachable", fmt.Sprintf("Nothing answered on port %d in sandbox %s.", e.p.Port, e.p.Sandbox))
		},
	}
}

func stripCredentials(r *http.Request) {
	if strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		r.Header.Del("Authorization")
	}
	cs := r.Cookies()
	r.Header.Del("Cookie")
	for _, c := range cs {
		if c.Name != cookieName {
			r.AddCookie(c)
		}
	}
}

// stripCookies drops Set-Cookie lines with a Domain attribute (which would
// reach the preview host's parent or siblings) or our cookie's name.
func stripCookies(h http.Header) {
	var keep []string
	for _, line := range h.Values("Set-Cookie") {
		c, err := http.ParseSetCookie(line)
		if err != nil || c.Domain != "" || c.Name == cookieName || hasDomainAttr(line) {
			continue
		}
		keep = append(keep, line)
	}
	h.Del("Set-Cookie")
	for _, l := range keep {
		h.Add("Set-Cookie", l)
	}
}

func hasDomainAttr(line string) bool {
	for _, a := range strings.Split(line, ";")[1:] {
		k, _, _ := strings.Cut(strings.TrimSpace(a), "=")
		if strings.EqualFold(strings.TrimSpace(k), "domain") {
			return true
		}
	}
	return false
}
