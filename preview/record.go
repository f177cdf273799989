package preview

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"airlock/audit"
)

// recorder counts what a response writes and keeps its status.
type recorder struct {
	http.ResponseWriter
	status int
	down   atomic.Int64
	up     atomic.Int64
}

func (r *recorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
	r.ResponseWriter.WriteHeader(s)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.down.Add(int64(n))
	return n, err
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack hands over the client connection (a WebSocket), still counted.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if r.status == 0 {
		r.status = http.StatusSwitchingProtocols
	}
	return &countingConn{Conn: c, r: r}, rw, nil
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

type countingConn struct {
	net.Conn
	r *recorder
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.r.up.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.r.down.Add(int64(n))
	return n, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

type ctxKey struct{}

type routed struct {
	e         *entry
	principal string
}

func withEntry(r *http.Request, e *entry, who string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), ctxKey{}, routed{e, who}))
}

// ingress records one request through the listener (the query
// redacted): at once, or aggregated when it is part of a flood (f).
func (m *Manager) ingress(r *http.Request, rt routing, rec *recorder, d time.Duration) {
	e := rt.e
	ev := audit.New(audit.KindIngress, "")
	in := &audit.Ingress{Principal: rt.who, Client: r.RemoteAddr, Method: r.Method, Path: redactPath(r), Host: trunc(r.Host, 255),
		Status: rec.status, BytesUp: rec.up.Load(), BytesDown: rec.down.Load(), DurationMS: d.Milliseconds(), Proto: r.Proto}
	ev.Verdict = "deny"
	switch {
	case e != nil:
		ev.Sandbox, ev.ID, in.Port = e.p.Sandbox, e.p.ID, int(e.p.Port)
		if rt.pass {
			ev.Verdict = "allow"
		}
	default:
		if id, err := m.previewID(r.Host); err == nil {
			ev.ID = id
		}
	}
	if up := r.Header.Get("Upgrade"); up != "" {
		in.Upgrade = trunc(strings.ToLower(up), 32)
	}
	ev.Ingress = in
	var ok bool
	switch rt.fate {
	case fateStray:
		ev, ok = m.strays.note(clientKey(r.RemoteAddr), ev)
	case fateThrottled:
		ev, ok = e.note(ev)
	default:
		ok = true
	}
	if ok {
		m.cfg.Events.Emit(ev)
	}
}

// redactPath is the request's path; a query is replaced by "?[REDACTED]".
func redactPath(r *http.Request) string {
	p := trunc(r.URL.EscapedPath(), 2048)
	if r.URL.RawQuery != "" || r.URL.ForceQuery {
		p += "?[REDACTED]"
	}
	return p
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
