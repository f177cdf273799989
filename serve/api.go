package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"airlock/audit"
	"airlock/client"
	"airlock/internal/randid"
)

// Backend is what the control API drives. The appliance implements it
// (Appliance); tests use a fake. Errors that are *client.Error keep their
// code; any other error is reported as "internal".
type Backend interface {
	Health(ctx context.Context) client.Health
	Create(ctx context.Context, req client.CreateRequest) (client.Sandbox, error)
	List(ctx context.Context) ([]client.Sandbox, error)
	Get(ctx context.Context, id string) (client.Sandbox, error)
	Delete(ctx context.Context, id string) error
	// Exec runs a command; output is written to stdout and stderr as it
	// comes. It returns when the command has ended.
	Exec(ctx context.Context, id string, req client.ExecRequest, stdout, stderr io.Writer) (client.ExecResult, error)
	CopyIn(ctx context.Context, id, dir string, tar io.Reader) error
	CopyOut(ctx context.Context, id, path string, w io.Writer) error
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	Snapshot(ctx context.Context, id string) (client.Snapshot, error)
	Diff(ctx context.Context, id string) (client.Diff, error)
	Summary(ctx context.Context, id string) (client.Summary, error)
	Policies(ctx context.Context) ([]client.PolicyInfo, error)
	ReloadPolicies(ctx context.Context, by string) (client.ReloadResult, error)
	// Logs calls fn for each event matching q, oldest first.
	Logs(ctx context.Context, q client.LogQuery, fn func(audit.Event) error) error
	// FollowLogs calls fn for each event matching q written after
	// q.AfterSeq (0: after the newest event now), as it arrives, until
	// ctx ends or fn fails.
	FollowLogs(ctx context.Context, q client.LogQuery, fn func(audit.Event) error) error
	Approvals(ctx context.Context) ([]client.Approval, error)
	Decide(ctx context.Context, id string, d client.Decision, by string) (client.Approval, error)
}

// API is the control API's HTTP handler.
type API struct {
	Backend Backend
	Log     *slog.Logger
	// Token, when set, is the bearer token every request must carry (the
	// TCP listener); the unix socket relies on its file mode instead.
	Token string
	// MaxBody bounds JSON request bodies (default 16 MiB).
	MaxBody int64
	// Principals, when set, are the callers the TCP listener admits by
	// their bearer tokens (principals.go); it holds Token's admin too.
	Principals *principalStore
	// Owners records which principal created each sandbox (shared by
	// every listener); nil keeps them in memory.
	Owners *Owners
	// Events receives a `refusal` record for each request turned away.
	Events audit.Emitter
	// Defaults are what a create leaves unset, for quota checks.
	Defaults Defaults

	ownersOnce sync.Once
	quota      quotas
}

type ctxKey int

const (
	keyRequestID ctxKey = iota
	keyPeer
)

// Handler returns the routed handler with request ids, auth and logging.
func (a *API) Handler() http.Handler { return a.wrap(a.mux()) }

// mux routes every endpoint (TestOpenAPIMatchesRoutes walks it).
func (a *API) mux() *http.ServeMux {
	mux := http.NewServeMux()
	v := client.APIVersion
	mux.HandleFunc("GET "+v+"/health", a.health)
	mux.HandleFunc("POST "+v+"/sandboxes", a.create)
	mux.HandleFunc("GET "+v+"/sandboxes", a.list)
	mux.HandleFunc("GET "+v+"/sandboxes/{id}", a.get)
	mux.HandleFunc("DELETE "+v+"/sandboxes/{id}", a.delete)
	mux.HandleFunc("POST "+v+"/sandboxes/{id}/exec", a.exec)
	mux.HandleFunc("PUT "+v+"/sandboxes/{id}/files", a.copyIn)
	mux.HandleFunc("GET "+v+"/sandboxes/{id}/files", a.copyOut)
	mux.HandleFunc("POST "+v+"/sandboxes/{id}/pause", a.simple(Backend.Pause))
	mux.HandleFunc("POST "+v+"/sandboxes/{id}/resume", a.simple(Backend.Resume))
	mux.HandleFunc("POST "+v+"/sandboxes/{id}/snapshot", a.snapshot)
	mux.HandleFunc("GET "+v+"/sandboxes/{id}/diff", a.diff)
	mux.HandleFunc("GET "+v+"/sandboxes/{id}/summary", a.summary)
	mux.HandleFunc("GET "+v+"/sandboxes/{id}/artifacts", a.artifacts)
	mux.HandleFunc("POST "+v+"/sandboxes/{id}/reset", a.reset)
	a.templateRoutes(mux, v)
	mux.HandleFunc("GET "+v+"/sandboxes/{id}/artifacts/{name...}", a.artifact)
	mux.HandleFunc("GET "+v+"/policies", a.policies)
	mux.HandleFunc("POST "+v+"/policies/reload", a.reload)
	mux.HandleFunc("GET "+v+"/logs", a.logs)
	a.agentRoutes(mux, v)
	a.lockdownRoutes(mux, v)
	a.cacheRoutes(mux, v)
	a.uiRoutes(mux, v)
	a.accessRoutes(mux, v)
	a.nodeRoutes(mux, v)
	mux.HandleFunc("GET "+v+"/approvals", a.approvals)
	mux.HandleFunc("POST "+v+"/approvals/{id}", a.decide)
	a.principalRoutes(mux, v)
	a.previewRoutes(mux, v)
	a.mcpRoutes(mux, v)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		a.fail(w, r, client.Errorf(client.CodeNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return mux
}

func (a *API) log() *slog.Logger {
	if a.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Log
}

// wrap adds the request id, the principal's checks (authorize) and an
// access log line.
func (a *API) wrap(next *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if id == "" || len(id) > 64 {
			id = "req-" + randid.Hex(8)
		}
		w.Header().Set("X-Request-Id", id)
		r = r.WithContext(context.WithValue(r.Context(), keyRequestID, id))
		r, ok := a.authorize(w, r, next)
		if !ok {
			return
		}
		start := time.Now()
		next.ServeHTTP(w, r)
		a.log().Debug("api", "request_id", id, "method", r.Method, "path", r.URL.Path,
			"peer", Peer(r.Context()), "duration", time.Since(start))
	})
}

// RequestID returns the request id of an API request's context.
func RequestID(ctx context.Context) string {
	s, _ := ctx.Value(keyRequestID).(string)
	return s
}

// Peer names who is calling: "NAME (uid N)" over the unix socket,
// "token@ADDR" (the peer address) over TCP, "" when unknown.
func Peer(ctx context.Context) string {
	s, _ := ctx.Value(keyPeer).(string)
	return s
}

// peerUID is the caller's uid over the unix socket (SO_PEERCRED); false
// over TCP or when unknown.
func peerUID(ctx context.Context) (uint32, bool) {
	uid, ok := ctx.Value(keyPeerUID{}).(uint32)
	return uid, ok
}

type keyPeerUID struct{}

// WithPeer returns ctx carrying the caller's name (see Peer).
func WithPeer(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, keyPeer, who)
}

func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae *client.Error
	if !errors.As(err, &ae) {
		a.log().Error("api: internal error", "request_id", RequestID(r.Context()), "path", r.URL.Path, "err", err)
		ae = client.Errorf(client.CodeInternal, "%v", err)
	}
	out := *ae
	out.RequestID = RequestID(r.Context())
	if out.Status == 0 {
		out.Status = http.StatusInternalServerError
	}
	writeJSON(w, out.Status, out)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (a *API) reply(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// replyList is reply for a list: [] rather than null when it is empty.
func replyList[T any](a *API, w http.ResponseWriter, r *http.Request, list []T, err error) {
	if list == nil {
		list = []T{}
	}
	a.reply(w, r, list, err)
}

func (a *API) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	limit := a.MaxBody
	if limit == 0 {
		limit = 16 << 20
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		a.fail(w, r, client.Errorf(client.CodeInvalid, "bad request body: %v", err))
		return false
	}
	return true
}

func (a *API) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, a.Backend.Health(r.Context()))
}

func (a *API) create(w http.ResponseWriter, r *http.Request) {
	var req client.CreateRequest
	if !a.decode(w, r, &req) {
		return
	}
	created, ok := a.admitCreate(w, r, &req)
	if !ok {
		return
	}
	sb, err := a.Backend.Create(r.Context(), req)
	created(sb.ID, err)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, a.withOwner(sb))
}

func (a *API) list(w http.ResponseWriter, r *http.Request) {
	sbs, err := a.Backend.List(r.Context())
	sbs = a.visible(r, sbs)
	for i := range sbs {
		sbs[i] = a.withOwner(sbs[i])
	}
	replyList(a, w, r, sbs, err)
}

func (a *API) get(w http.ResponseWriter, r *http.Request) {
	sb, err := a.Backend.Get(r.Context(), r.PathValue("id"))
	a.reply(w, r, a.withOwner(sb), err)
}

// withOwner names the principal that created sb (owners.json).
func (a *API) withOwner(sb client.Sandbox) client.Sandbox {
	if o, ok := a.owners().Owner(sb.ID); ok {
		sb.Owner = o
	}
	return sb
}

func (a *API) delete(w http.ResponseWriter, r *http.Request) {
	if err := a.Backend.Delete(r.Context(), r.PathValue("id")); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) simple(f func(Backend, context.Context, string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := f(a.Backend, r.Context(), r.PathValue("id")); err != nil {
			a.fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

func (a *API) snapshot(w http.ResponseWriter, r *http.Request) {
	s, err := a.Backend.Snapshot(r.Context(), r.PathValue("id"))
	a.reply(w, r, s, err)
}

func (a *API) diff(w http.ResponseWriter, r *http.Request) {
	d, err := a.Backend.Diff(r.Context(), r.PathValue("id"))
	a.reply(w, r, d, err)
}

func (a *API) summary(w http.ResponseWriter, r *http.Request) {
	s, err := a.Backend.Summary(r.Context(), r.PathValue("id"))
	a.reply(w, r, s, err)
}

func (a *API) policies(w http.ResponseWriter, r *http.Request) {
	ps, err := a.Backend.Policies(r.Context())
	replyList(a, w, r, ps, err)
}

func (a *API) reload(w http.ResponseWriter, r *http.Request) {
	res, err := a.Backend.ReloadPolicies(r.Context(), Peer(r.Context()))
	a.reply(w, r, res, err)
}

func (a *API) approvals(w http.ResponseWriter, r *http.Request) {
	as, err := a.Backend.Approvals(r.Context())
	replyList(a, w, r, a.visibleApprovals(r, as), err)
}

func (a *API) decide(w http.ResponseWriter, r *http.Request) {
	var d client.Decision
	if !a.decode(w, r, &d) {
		return
	}
	ap, err := a.Backend.Decide(r.Context(), r.PathValue("id"), d, Peer(r.Context()))
	a.reply(w, r, ap, err)
}

func (a *API) copyIn(w http.ResponseWriter, r *http.Request) {
	dir := r.URL.Query().Get("path")
	if dir == "" {
		dir = "/workspace"
	}
	if err := a.Backend.CopyIn(r.Context(), r.PathValue("id"), dir, r.Body); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) copyOut(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Query().Get("path")
	if path == "" {
		a.fail(w, r, client.Errorf(client.CodeInvalid, "the path query parameter is required"))
		return
	}
	// Buffer the first bytes so an error before any data is a JSON error.
	lw := &lazyWriter{w: w, contentType: "application/x-tar"}
	if err := a.Backend.CopyOut(r.Context(), r.PathValue("id"), path, lw); err != nil {
		if !lw.started {
			a.fail(w, r, err)
			return
		}
		a.log().Warn("api: copy out failed after data was sent", "request_id", RequestID(r.Context()), "err", err)
		return
	}
	lw.start()
}

// lazyWriter sends the 200 header only with the first byte, so errors
// that come before any data can still become a JSON error response.
type lazyWriter struct {
	w           http.ResponseWriter
	contentType string
	started     bool
}

func (l *lazyWriter) start() {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", l.contentType)
		l.w.WriteHeader(http.StatusOK)
	}
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	l.start()
	return l.w.Write(p)
}

func (a *API) logs(w http.ResponseWriter, r *http.Request) {
	q, err := parseLogQuery(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	nd := newNDJSON(w)
	send, ok := a.eventFilter(w, r, q, func(e audit.Event) error { return nd.send(e) })
	if !ok {
		return
	}
	if follow, ferr := followParam(r); ferr != nil {
		a.fail(w, r, ferr)
		return
	} else if follow {
		// Answer at once, so the client knows the stream is open before
		// the first event arrives.
		nd.flush()
		err = a.Backend.FollowLogs(r.Context(), q, send)
	} else {
		err = a.Backend.Logs(r.Context(), q, send)
	}
	if err != nil {
		if !nd.started {
			a.fail(w, r, err)
			return
		}
		_ = nd.send(client.ExecFrame{Error: client.Errorf(client.CodeInternal, "%v", err)})
	}
	nd.start()
}

// followParam reads ?follow= (1, true, 0, false or absent).
func followParam(r *http.Request) (bool, error) {
	switch v := r.URL.Query().Get("follow"); v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	default:
		return false, client.Errorf(client.CodeInvalid, "follow: want 1 or 0, got %q", v)
	}
}

func parseLogQuery(r *http.Request) (client.LogQuery, error) {
	return client.DecodeLogQuery(r.URL.Query())
}

func (a *API) exec(w http.ResponseWriter, r *http.Request) {
	var req client.ExecRequest
	if !a.decode(w, r, &req) {
		return
	}
	if !a.admitExec(w, r, &req) {
		return
	}
	if len(req.Argv) == 0 && req.Shell == "" {
		a.fail(w, r, client.Errorf(client.CodeInvalid, "argv is empty: give the command to run (argv, or a shell line)"))
		return
	}
	if req.TTY {
		a.agent(func(b AgentBackend, w http.ResponseWriter, r *http.Request) { a.execTTY(b, w, r, req) })(w, r)
		return
	}
	nd := newNDJSON(w)
	res, err := a.Backend.Exec(r.Context(), r.PathValue("id"), req,
		nd.stream("stdout"), nd.stream("stderr"))
	a.endStream(w, r, nd, res, err)
}

// ndjson writes one JSON value per line and flushes each, serialized
// across the stdout and stderr writers of an exec.
type ndjson struct {
	w       http.ResponseWriter
	enc     *json.Encoder
	mu      chan struct{}
	started bool
}

func newNDJSON(w http.ResponseWriter) *ndjson {
	n := &ndjson{w: w, enc: json.NewEncoder(w), mu: make(chan struct{}, 1)}
	return n
}

func (n *ndjson) start() {
	if !n.started {
		n.started = true
		n.w.Header().Set("Content-Type", "application/x-ndjson")
		n.w.WriteHeader(http.StatusOK)
	}
}

// flush sends the status line and headers now.
func (n *ndjson) flush() {
	n.mu <- struct{}{}
	defer func() { <-n.mu }()
	n.start()
	if f, ok := n.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (n *ndjson) send(v any) error { return n.write(v, true) }

// last writes the stream's final value without flushing it: the
// handler returns next, and net/http sends it with the end of the
// response in one write (the client reads to that end).
func (n *ndjson) last(v any) error { return n.write(v, false) }

func (n *ndjson) write(v any, flush bool) error {
	n.mu <- struct{}{}
	defer func() { <-n.mu }()
	n.start()
	if err := n.enc.Encode(v); err != nil {
		return fmt.Errorf("write stream: %w", err)
	}
	if f, ok := n.w.(http.Flusher); ok && flush {
		f.Flush()
	}
	return nil
}

func (n *ndjson) stream(name string) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		if len(p) == 0 {
			return 0, nil
		}
		b := make([]byte, len(p))
		copy(b, p)
		if err := n.send(client.ExecFrame{Stream: name, Data: b}); err != nil {
			return 0, err
		}
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// backendAs is the backend as the optional interface T (a kill switch, a
// package cache, previews, ...); when it is not one, the request is
// answered 501 saying what "this appliance" lacks.
func backendAs[T any](a *API, w http.ResponseWriter, r *http.Request, lacks string) (T, bool) {
	b, ok := a.Backend.(T)
	if !ok {
		a.fail(w, r, client.Errorf(client.CodeUnsupported, "this appliance %s", lacks))
	}
	return b, ok
}

// withBackend is a handler that runs h on the backend as the optional
// interface T, or answers 501 as backendAs does.
func withBackend[T any](a *API, lacks string, h func(T, http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if b, ok := backendAs[T](a, w, r, lacks); ok {
			h(b, w, r)
		}
	}
}
