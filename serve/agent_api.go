package serve

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"airlock/client"
	"airlock/internal/agentwire"
)

// AgentBackend is the part of the control API served by the in-sandbox
// agent: processes and single files. A Backend without it answers these
// routes with "unsupported".
type AgentBackend interface {
	Processes(ctx context.Context, id string) ([]client.Process, error)
	Kill(ctx context.Context, id, execID string) error
	Signal(ctx context.Context, id, execID, sig string) error
	Attach(ctx context.Context, id, execID string, stdout, stderr io.Writer) (client.ExecResult, error)
	ReadFile(ctx context.Context, id, path string, w http.ResponseWriter) error
	WriteFile(ctx context.Context, id, path string, mode uint32, size int64, r io.Reader) (client.FileInfo, error)
	ListDir(ctx context.Context, id, path string) ([]client.FileInfo, error)
	Stat(ctx context.Context, id, path string) (client.FileInfo, error)
	Remove(ctx context.Context, id, path string, recursive bool) error
	Mkdir(ctx context.Context, id, path string, parents bool, mode uint32) error
	// ExecTTY runs a command on a terminal: stdin is typed into it,
	// resize changes its size, stdout gets its output.
	ExecTTY(ctx context.Context, id string, req client.ExecRequest, stdin io.Reader, resize <-chan client.Resize, stdout io.Writer) (client.ExecResult, error)
}

// agentRoutes adds the agent's routes under prefix v.
func (a *API) agentRoutes(mux *http.ServeMux, v string) {
	mux.HandleFunc("GET "+v+"/sandboxes/{id}/processes", a.agent(a.processes))
	mux.HandleFunc("GET "+v+"/sandboxes/{id}/processes/{exec}/attach", a.agent(a.attach))
	mux.HandleFunc("POST "+v+"/sandboxes/{id}/processes/{exec}/kill", a.agent(a.killProc))
	mux.HandleFunc("POST "+v+"/sandboxes/{id}/processes/{exec}/signal", a.agent(a.signalProc))
	mux.HandleFunc("GET "+v+"/sandboxes/{id}/fs/file", a.agent(a.readFile))
	mux.HandleFunc("PUT "+v+"/sandboxes/{id}/fs/file", a.agent(a.writeFile))
	mux.HandleFunc("DELETE "+v+"/sandboxes/{id}/fs/file", a.agent(a.removeFile))
	mux.HandleFunc("GET "+v+"/sandboxes/{id}/fs/list", a.agent(a.listDir))
	mux.HandleFunc("GET "+v+"/sandboxes/{id}/fs/stat", a.agent(a.statPath))
	mux.HandleFunc("POST "+v+"/sandboxes/{id}/fs/mkdir", a.agent(a.mkdir))
	mux.HandleFunc("POST "+v+"/sandboxes/{id}/shell", a.shell)
}

func (a *API) agent(h func(AgentBackend, http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ab, ok := backendAs[AgentBackend](a, w, r, "has no in-sandbox agent API")
		if !ok {
			return
		}
		h(ab, w, r)
	}
}

func (a *API) processes(b AgentBackend, w http.ResponseWriter, r *http.Request) {
	ps, err := b.Processes(r.Context(), r.PathValue("id"))
	if ps == nil {
		ps = []client.Process{}
	}
	a.reply(w, r, ps, err)
}

func (a *API) killProc(b AgentBackend, w http.ResponseWriter, r *http.Request) {
	a.noContent(w, r, b.Kill(r.Context(), r.PathValue("id"), r.PathValue("exec")))
}

func (a *API) signalProc(b AgentBackend, w http.ResponseWriter, r *http.Request) {
	var s client.Signal
	if !a.decode(w, r, &s) {
		return
	}
	a.noContent(w, r, b.Signal(r.Context(), r.PathValue("id"), r.PathValue("exec"), s.Signal))
}

func (a *API) noContent(w http.ResponseWriter, r *http.Request, err error) {
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// attach streams like exec: NDJSON output frames, then the exit (Running
// when the client went away first is never seen by it).
func (a *API) attach(b AgentBackend, w http.ResponseWriter, r *http.Request) {
	nd := newNDJSON(w)
	res, err := b.Attach(r.Context(), r.PathValue("id"), r.PathValue("exec"), nd.stream("stdout"), nd.stream("stderr"))
	a.endStream(w, r, nd, res, err)
}

// endStream ends an NDJSON exec stream with its exit or error frame.
func (a *API) endStream(w http.ResponseWriter, r *http.Request, nd *ndjson, res client.ExecResult, err error) {
	if err != nil && !nd.started {
		a.fail(w, r, err)
		return
	}
	if err != nil {
		var ae *client.Error
		if !errors.As(err, &ae) {
			ae = client.Errorf(client.CodeInternal, "%v", err)
		}
		_ = nd.last(client.ExecFrame{Error: ae})
		return
	}
	_ = nd.last(client.ExecFrame{Exit: &res})
}

func (a *API) readFile(b AgentBackend, w http.ResponseWriter, r *http.Request) {
	if err := b.ReadFile(r.Context(), r.PathValue("id"), r.URL.Query().Get("path"), w); err != nil {
		a.fail(w, r, err)
	}
}

func (a *API) writeFile(b AgentBackend, w http.ResponseWriter, r *http.Request) {
	if r.ContentLength < 0 {
		a.fail(w, r, client.Errorf(client.CodeInvalid, "a file upload needs a Content-Length"))
		return
	}
	mode, err := parseMode(r.URL.Query().Get("mode"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	fi, err := b.WriteFile(r.Context(), r.PathValue("id"), r.URL.Query().Get("path"), mode, r.ContentLength, r.Body)
	a.reply(w, r, fi, err)
}

func parseMode(s string) (uint32, error) {
	if s == "" {
		return 0, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, client.Errorf(client.CodeInvalid, "mode %q: want octal permission bits (e.g. 0644)", s)
	}
	return uint32(m), nil
}

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, client.Errorf(client.CodeInvalid, "%s=%q: want true or false", name, v)
	}
	return b, nil
}

func (a *API) removeFile(b AgentBackend, w http.ResponseWriter, r *http.Request) {
	rec, err := boolParam(r, "recursive")
	if err == nil {
		err = b.Remove(r.Context(), r.PathValue("id"), r.URL.Query().Get("path"), rec)
	}
	a.noContent(w, r, err)
}

func (a *API) listDir(b AgentBackend, w http.ResponseWriter, r *http.Request) {
	fs, err := b.ListDir(r.Context(), r.PathValue("id"), r.URL.Query().Get("path"))
	if fs == nil {
		fs = []client.FileInfo{}
	}
	a.reply(w, r, fs, err)
}

func (a *API) statPath(b AgentBackend, w http.ResponseWriter, r *http.Request) {
	fi, err := b.Stat(r.Context(), r.PathValue("id"), r.URL.Query().Get("path"))
	a.reply(w, r, fi, err)
}

func (a *API) mkdir(b AgentBackend, w http.ResponseWriter, r *http.Request) {
	parents, err := boolParam(r, "parents")
	var mode uint32
	if err == nil {
		mode, err = parseMode(r.URL.Query().Get("mode"))
	}
	if err == nil {
		err = b.Mkdir(r.Context(), r.PathValue("id"), r.URL.Query().Get("path"), parents, mode)
	}
	a.noContent(w, r, err)
}

// execTTY upgrades the connection and relays a terminal session in the
// agent's frames (see client.ExecTTY).
func (a *API) execTTY(b AgentBackend, w http.ResponseWriter, r *http.Request, req client.ExecRequest) {
	a.relayTTY(w, r, func(ctx context.Context, stdin io.Reader, resize <-chan client.Resize, out io.Writer) (client.ExecResult, error) {
		return b.ExecTTY(ctx, r.PathValue("id"), req, stdin, resize, out)
	})
}

// ttyRun runs one terminal session for relayTTY.
type ttyRun func(ctx context.Context, stdin io.Reader, resize <-chan client.Resize, out io.Writer) (client.ExecResult, error)

// relayTTY upgrades the connection and relays the session run starts.
func (a *API) relayTTY(w http.ResponseWriter, r *http.Request, run ttyRun) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), client.TTYUpgrade) {
		a.fail(w, r, client.Errorf(client.CodeInvalid, "a terminal exec is an upgrade: send Connection: Upgrade and Upgrade: %s (client.ExecTTY)", client.TTYUpgrade))
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		a.fail(w, r, client.Errorf(client.CodeInternal, "hijack: %v", err))
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+client.TTYUpgrade+"\r\n\r\n"); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	stdinR, stdinW := io.Pipe()
	resize := make(chan client.Resize, 4)
	go func() { // the client's frames: typed bytes, resizes, end of input
		defer stdinW.Close()
		fr := agentwire.NewReader(brw)
		for {
			t, p, err := fr.Next()
			if err != nil {
				cancel() // the client went away: the command is killed
				return
			}
			switch t {
			case agentwire.TStdin:
				if _, err := stdinW.Write(p); err != nil {
					return
				}
			case agentwire.TResize:
				var rs client.Resize
				if json.Unmarshal(p, &rs) == nil {
					select {
					case resize <- rs:
					default:
					}
				}
			case agentwire.TStdinEOF:
				return
			}
		}
	}()
	var wmu sync.Mutex
	out := writerFunc(func(p []byte) (int, error) {
		wmu.Lock()
		defer wmu.Unlock()
		total := len(p)
		for len(p) > 0 {
			n := min(len(p), agentwire.MaxData)
			if err := agentwire.WriteFrame(conn, agentwire.TStdout, p[:n]); err != nil {
				return 0, err
			}
			p = p[n:]
		}
		return total, nil
	})
	res, err := run(ctx, stdinR, resize, out)
	f := client.ExecFrame{Exit: &res}
	if err != nil {
		var ae *client.Error
		if !errors.As(err, &ae) {
			ae = client.Errorf(client.CodeInternal, "%v", err)
		}
		f = client.ExecFrame{Error: ae}
	}
	js, _ := json.Marshal(f)
	wmu.Lock()
	_ = agentwire.WriteFrame(conn, agentwire.TResult, js)
	wmu.Unlock()
}
