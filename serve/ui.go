package serve

import (
	"context"
	"embed"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"strconv"

	"airlock/audit"
	"airlock/client"
)

// The live view: a read-only page on the control listener, behind the same
// auth as the API (the unix socket's mode, or the bearer token on TCP;
// `airlock ui` proxies a loopback port to the socket). Its assets are
// embedded; it loads nothing from elsewhere.
//
//go:embed ui/*
var uiAssets embed.FS

// ReportBackend renders a sandbox's review report as HTML (the live view's
// links). A Backend without it answers with "unsupported".
type ReportBackend interface {
	ReportHTML(ctx context.Context, id string, w io.Writer) error
}

func (a *API) uiRoutes(mux *http.ServeMux, v string) {
	sub, _ := fs.Sub(uiAssets, "ui")
	files := http.FileServerFS(sub)
	mux.Handle("GET /ui/", uiHeaders(http.StripPrefix("/ui/", files)))
	mux.HandleFunc("GET /ui/report/{id}", a.uiReport)
	mux.HandleFunc("GET "+v+"/events/stream", a.eventStream)
}

// uiHeaders forbids every origin but the page's own (no external
// resources, no framing).
func uiHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

func (a *API) uiReport(w http.ResponseWriter, r *http.Request) {
	rb, ok := backendAs[ReportBackend](a, w, r, "renders no reports")
	if !ok {
		return
	}
	lw := &lazyWriter{w: w, contentType: "text/html; charset=utf-8"}
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:")
	if err := rb.ReportHTML(r.Context(), r.PathValue("id"), lw); err != nil && !lw.started {
		a.fail(w, r, err)
	}
}

// eventStream is GET /v1/events/stream: the audit events written from now
// on (filtered like /v1/logs), as server-sent events, one `audit` event per
// record with its seq as the id. A reconnecting EventSource sends
// Last-Event-ID and resumes after it.
func (a *API) eventStream(w http.ResponseWriter, r *http.Request) {
	q, err := parseLogQuery(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		if n, err := strconv.ParseUint(last, 10, 64); err == nil {
			q.AfterSeq = n
		}
	}
	send, ok := a.eventFilter(w, r, q, func(e audit.Event) error { return a.sendSSE(w, e) })
	if !ok {
		return
	}
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, ": stream open\n\n")
	if fl != nil {
		fl.Flush()
	}
	err = a.Backend.FollowLogs(r.Context(), q, send)
	if err != nil && r.Context().Err() == nil {
		b, _ := json.Marshal(client.Errorf(client.CodeInternal, "%v", err))
		_, _ = io.WriteString(w, "event: failure\ndata: "+string(b)+"\n\n")
	}
}

// sendSSE writes one event as a server-sent `audit` event and flushes it.
func (a *API) sendSSE(w http.ResponseWriter, e audit.Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(w, "id: "+strconv.FormatUint(e.Seq, 10)+"\nevent: audit\ndata: "+string(b)+"\n\n"); err != nil {
		return err
	}
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	return nil
}

// ReportHTML renders a sandbox's report from the audit store
// (ReportBackend).
func (a *Appliance) ReportHTML(ctx context.Context, id string, w io.Writer) error {
	st := a.pipeline.Store()
	if st == nil {
		return client.Errorf(client.CodeUnavailable, "this appliance keeps no event store (audit.store)")
	}
	if err := a.pipeline.Flush(ctx); err != nil {
		return err
	}
	rep, err := audit.BuildReport(ctx, st, id)
	if err != nil {
		return err
	}
	return rep.HTML(w)
}
