package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"airlock/audit"
	"airlock/client"
)

// fakeBackend records calls and answers from memory.
type fakeBackend struct {
	mu        sync.Mutex
	sandboxes map[string]client.Sandbox
	files     map[string][]byte
	calls     []string
	lastPeer  string
	events    []audit.Event
	follow    chan audit.Event
	following chan struct{}
	followQ   client.LogQuery
}

func newFake() *fakeBackend {
	return &fakeBackend{sandboxes: map[string]client.Sandbox{}, files: map[string][]byte{}}
}

func (f *fakeBackend) record(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeBackend) lookup(id string) (client.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[id]
	if !ok {
		return sb, client.Errorf(client.CodeNotFound, "no sandbox %q", id)
	}
	return sb, nil
}

func (f *fakeBackend) Health(context.Context) client.Health {
	return client.Health{Status: "ok", Version: "test", Sandboxes: len(f.sandboxes)}
}

func (f *fakeBackend) Create(_ context.Context, req client.CreateRequest) (client.Sandbox, error) {
	if req.Image == "bad" {
		return client.Sandbox{}, client.Errorf(client.CodeInvalid, "image %q not found: run make image", req.Image)
	}
	f.record("create %s %s", req.Image, req.Policy)
	f.mu.Lock()
	defer f.mu.Unlock()
	id := fmt.Sprintf("sb-%d", len(f.sandboxes)+1)
	sb := client.Sandbox{ID: id, Image: req.Image, Policy: req.Policy, State: "running", Address: "198.18.64.2"}
	f.sandboxes[id] = sb
	return sb, nil
}

func (f *fakeBackend) List(context.Context) ([]client.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []client.Sandbox
	for _, sb := range f.sandboxes {
		out = append(out, sb)
	}
	return out, nil
}

func (f *fakeBackend) Get(_ context.Context, id string) (client.Sandbox, error) { return f.lookup(id) }

func (f *fakeBackend) Delete(_ context.Context, id string) error {
	if _, err := f.lookup(id); err != nil {
		return err
	}
	f.record("delete %s", id)
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sandboxes, id)
	return nil
}

func (f *fakeBackend) Exec(ctx context.Context, id string, req client.ExecRequest, stdout, stderr io.Writer) (client.ExecResult, error) {
	if _, err := f.lookup(id); err != nil {
		return client.ExecResult{}, err
	}
	f.record("exec %s %s", id, strings.Join(req.Argv, " "))
	switch req.Argv[0] {
	case "boom":
		fmt.Fprint(stdout, "partial")
		return client.ExecResult{}, errors.New("engine went away")
	case "cat":
		stdout.Write(req.Stdin)
		return client.ExecResult{ExitCode: 0}, nil
	}
	for i := 0; i < 3; i++ {
		fmt.Fprintf(stdout, "out%d\n", i)
		fmt.Fprintf(stderr, "err%d\n", i)
	}
	return client.ExecResult{ExitCode: 3, DurationMS: 5}, nil
}

func (f *fakeBackend) CopyIn(_ context.Context, id, dir string, r io.Reader) error {
	if _, err := f.lookup(id); err != nil {
		return err
	}
	b, _ := io.ReadAll(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[dir] = b
	return nil
}

func (f *fakeBackend) CopyOut(_ context.Context, id, path string, w io.Writer) error {
	if _, err := f.lookup(id); err != nil {
		return err
	}
	f.mu.Lock()
	b, ok := f.files[path]
	f.mu.Unlock()
	if !ok {
		return client.Errorf(client.CodeNotFound, "%s: no such file in the sandbox", path)
	}
	_, err := w.Write(b)
	return err
}

func (f *fakeBackend) Pause(_ context.Context, id string) error {
	return client.Errorf(client.CodeUnsupported, "pause needs cgroup v2 for rootless sandboxes; this host has cgroup v1")
}

func (f *fakeBackend) Resume(_ context.Context, id string) error {
	_, err := f.lookup(id)
	return err
}

func (f *fakeBackend) Snapshot(_ context.Context, id string) (client.Snapshot, error) {
	return client.Snapshot{Image: "localhost/airlock-snapshot:" + id, Warning: "holds everything"}, nil
}

func (f *fakeBackend) Diff(context.Context, string) (client.Diff, error) {
	return client.Diff{Changes: []client.FileChange{{Path: "a.txt", Change: "added"}}}, nil
}

func (f *fakeBackend) Summary(_ context.Context, id string) (client.Summary, error) {
	return client.Summary{Sandbox: id, DNSNames: []string{"git.example.test"}}, nil
}

func (f *fakeBackend) Policies(context.Context) ([]client.PolicyInfo, error) { return nil, nil }

func (f *fakeBackend) ReloadPolicies(_ context.Context, by string) (client.ReloadResult, error) {
	f.mu.Lock()
	f.lastPeer = by
	f.mu.Unlock()
	return client.ReloadResult{Rejected: []client.PolicyChange{{Name: "x", Errors: []string{"x.toml:1:1: bad"}}}}, nil
}

func (f *fakeBackend) Logs(_ context.Context, q client.LogQuery, fn func(audit.Event) error) error {
	for _, e := range f.events {
		if q.Sandbox != "" && e.Sandbox != q.Sandbox {
			continue
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// FollowLogs sends what the test pushes on f.follow (nil: nothing) until
// ctx ends, after telling f.following that the stream is open.
func (f *fakeBackend) FollowLogs(ctx context.Context, q client.LogQuery, fn func(audit.Event) error) error {
	f.mu.Lock()
	f.followQ = q
	f.mu.Unlock()
	if f.following != nil {
		close(f.following)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-f.follow:
			if q.Sandbox != "" && e.Sandbox != q.Sandbox {
				continue
			}
			if err := fn(e); err != nil {
				return err
			}
		}
	}
}

func (f *fakeBackend) Approvals(context.Context) ([]client.Approval, error) {
	return []client.Approval{{ID: "ap-1", Sandbox: "sb-1", Destination: "hooks.example.test:443", Rule: "categories.webhooks", State: "held"}}, nil
}

func (f *fakeBackend) Decide(_ context.Context, id string, d client.Decision, by string) (client.Approval, error) {
	if id != "ap-1" {
		return client.Approval{}, client.Errorf(client.CodeNotFound, "no held request %q", id)
	}
	state := "denied"
	if d.Approve {
		state = "approved"
	}
	return client.Approval{ID: id, State: state, DecidedBy: by}, nil
}

// startAPI serves the API on a unix socket in a temp dir and returns a
// client for it.
func startAPI(t *testing.T, b Backend, token string) (*client.Client, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	l, err := ListenUnix(sock, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTPServer((&API{Backend: b, Token: token}).Handler())
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return client.New(sock), sock
}

func TestAPISandboxLifecycle(t *testing.T) {
	fb := newFake()
	c, _ := startAPI(t, fb, "")
	ctx := context.Background()

	sb, err := c.Create(ctx, client.CreateRequest{Image: "busybox", Policy: "coding-agent"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != "sb-1" || sb.State != "running" {
		t.Fatalf("created %+v", sb)
	}
	got, err := c.Get(ctx, sb.ID)
	if err != nil || got.ID != sb.ID {
		t.Fatalf("get = %+v, %v", got, err)
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("list = %v, %v", list, err)
	}
	if err := c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(ctx, sb.ID)
	if !client.IsCode(err, client.CodeNotFound) {
		t.Fatalf("get after delete: %v, want not_found", err)
	}
	want := []string{"create busybox coding-agent", "delete sb-1"}
	if diff := cmp.Diff(want, fb.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestAPIErrorsAreJSONWithRequestID(t *testing.T) {
	c, sock := startAPI(t, newFake(), "")
	_, err := c.Create(context.Background(), client.CreateRequest{Image: "bad"})
	var ae *client.Error
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v, want *client.Error", err)
	}
	if ae.Status != 400 || ae.Code != client.CodeInvalid || !strings.Contains(ae.Message, "run make image") || !strings.HasPrefix(ae.RequestID, "req-") {
		t.Errorf("error = %+v", ae)
	}
	// Raw HTTP: unknown endpoint, unknown JSON field, caller's request id echoed.
	hc := unixHTTP(sock)
	req, _ := http.NewRequest("GET", "http://x/v1/nope", nil)
	req.Header.Set("X-Request-Id", "mine-1")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || resp.Header.Get("X-Request-Id") != "mine-1" ||
		!strings.Contains(string(body), `"code":"not_found"`) || !strings.Contains(string(body), `"request_id":"mine-1"`) {
		t.Errorf("unknown endpoint: %d %s %s", resp.StatusCode, resp.Header, body)
	}
	resp, err = hc.Post("http://x/v1/sandboxes", "application/json", strings.NewReader(`{"imag":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), `unknown field \"imag\"`) {
		t.Errorf("unknown field: %d %s", resp.StatusCode, body)
	}
}

func unixHTTP(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

func TestAPIExecStreams(t *testing.T) {
	fb := newFake()
	c, _ := startAPI(t, fb, "")
	ctx := context.Background()
	sb, _ := c.Create(ctx, client.CreateRequest{Image: "busybox"})

	var out, errb bytes.Buffer
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"sh", "-c", "x"}}, &out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || out.String() != "out0\nout1\nout2\n" || errb.String() != "err0\nerr1\nerr2\n" {
		t.Errorf("exec = %+v stdout %q stderr %q", res, out.String(), errb.String())
	}
	out.Reset()
	stdin := bytes.Repeat([]byte{0, 1, 2, 255}, 1000)
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"cat"}, Stdin: stdin}, &out, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), stdin) {
		t.Errorf("binary stdin/stdout round trip lost bytes: got %d bytes", out.Len())
	}
	// An engine failure after output started arrives as the final frame.
	out.Reset()
	_, err = c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"boom"}}, &out, nil)
	if err == nil || !strings.Contains(err.Error(), "engine went away") || out.String() != "partial" {
		t.Errorf("mid-stream failure: err %v, out %q", err, out.String())
	}
	_, err = c.Exec(ctx, "sb-404", client.ExecRequest{Argv: []string{"true"}}, &out, nil)
	if !client.IsCode(err, client.CodeNotFound) {
		t.Errorf("exec in unknown sandbox: %v", err)
	}
	_, err = c.Exec(ctx, sb.ID, client.ExecRequest{}, &out, nil)
	if !client.IsCode(err, client.CodeInvalid) {
		t.Errorf("exec with empty argv: %v", err)
	}
}

// Back-to-back execs of one client share one connection (an exec stream
// read to its end leaves it reusable), also after a failure frame: an
// agent framework's hundreds of calls pay no dial each.
func TestAPIExecReusesConnection(t *testing.T) {
	fb := newFake()
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	l, err := ListenUnix(sock, "")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	conns := 0
	srv := NewHTTPServer((&API{Backend: fb}).Handler())
	srv.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	c := client.New(sock)
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{Image: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{{"sh"}, {"boom"}, {"sh"}, {"cat"}, {"sh"}} {
		_, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: argv}, io.Discard, io.Discard)
		if (argv[0] == "boom") != (err != nil) {
			t.Fatalf("exec %s: %v", argv[0], err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if conns != 1 {
		t.Errorf("a create and five execs opened %d connections, want 1", conns)
	}
}

func TestAPIFilesAndMisc(t *testing.T) {
	fb := newFake()
	c, _ := startAPI(t, fb, "")
	ctx := context.Background()
	sb, _ := c.Create(ctx, client.CreateRequest{Image: "busybox"})
	payload := []byte("pretend this is a tar stream")
	if err := c.CopyIn(ctx, sb.ID, "/workspace/in", bytes.NewReader(payload)); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := c.CopyOut(ctx, sb.ID, "/workspace/in", &got); err != nil || !bytes.Equal(got.Bytes(), payload) {
		t.Fatalf("copy out = %q, %v", got.Bytes(), err)
	}
	if err := c.CopyOut(ctx, sb.ID, "/nope", &got); !client.IsCode(err, client.CodeNotFound) {
		t.Errorf("copy out of missing path: %v", err)
	}
	err := c.Pause(ctx, sb.ID)
	if !client.IsCode(err, client.CodeUnsupported) || !strings.Contains(err.Error(), "cgroup v1") {
		t.Errorf("pause: %v", err)
	}
	if err := c.Resume(ctx, sb.ID); err != nil {
		t.Errorf("resume: %v", err)
	}
	if s, err := c.Snapshot(ctx, sb.ID); err != nil || s.Warning == "" {
		t.Errorf("snapshot = %+v, %v", s, err)
	}
	if d, err := c.Diff(ctx, sb.ID); err != nil || len(d.Changes) != 1 {
		t.Errorf("diff = %+v, %v", d, err)
	}
	r, err := c.ReloadPolicies(ctx)
	if err != nil || len(r.Rejected) != 1 {
		t.Errorf("reload = %+v, %v", r, err)
	}
	if !strings.Contains(fb.lastPeer, fmt.Sprintf("(uid %d)", os.Getuid())) {
		t.Errorf("reload attributed to %q, want the caller's uid", fb.lastPeer)
	}
	ap, err := c.Decide(ctx, "ap-1", client.Decision{Approve: true, Once: true})
	if err != nil || ap.State != "approved" || !strings.Contains(ap.DecidedBy, "uid") {
		t.Errorf("approve = %+v, %v", ap, err)
	}
	if _, err := c.Decide(ctx, "ap-9", client.Decision{}); !client.IsCode(err, client.CodeNotFound) {
		t.Errorf("decide unknown: %v", err)
	}
	h, err := c.Health(ctx)
	if err != nil || h.Status != "ok" {
		t.Errorf("health = %+v, %v", h, err)
	}
}

func TestAPILogs(t *testing.T) {
	fb := newFake()
	for i, sb := range []string{"a", "b", "a"} {
		e := audit.New(audit.KindDNS, sb)
		e.DNS = &audit.DNS{QName: fmt.Sprintf("n%d.example.test", i)}
		fb.events = append(fb.events, e)
	}
	c, _ := startAPI(t, fb, "")
	var names []string
	err := c.Logs(context.Background(), client.LogQuery{Sandbox: "a"}, func(e audit.Event) error {
		names = append(names, e.DNS.QName)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"n0.example.test", "n2.example.test"}, names); diff != "" {
		t.Errorf("logs (-want +got):\n%s", diff)
	}
}

// TestAPILogsFollow: GET /v1/logs?follow=1 answers at once and streams
// each new event as one NDJSON line; the client's FollowLogs passes the
// query and after_seq through and returns nil when its context ends.
func TestAPILogsFollow(t *testing.T) {
	fb := newFake()
	fb.follow, fb.following = make(chan audit.Event), make(chan struct{})
	srv := httptest.NewServer((&API{Backend: fb}).Handler())
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/logs?follow=1&sandbox=a", nil)
	resp, err := http.DefaultClient.Do(req) // returns only once headers arrived
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "application/x-ndjson" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, ct)
	}
	<-fb.following
	br := bufio.NewReader(resp.Body)
	for i, sb := range []string{"b", "a"} {
		e := audit.New(audit.KindDNS, sb)
		e.DNS = &audit.DNS{QName: fmt.Sprintf("n%d.example.test", i)}
		fb.follow <- e
	}
	line, err := br.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var got audit.Event
	if err := json.Unmarshal(line, &got); err != nil || got.Sandbox != "a" || got.DNS.QName != "n1.example.test" {
		t.Fatalf("first line %q: %v", line, err)
	}

	// The client, against a backend of its own.
	fb = newFake()
	fb.follow, fb.following = make(chan audit.Event), make(chan struct{})
	srv2 := httptest.NewServer((&API{Backend: fb}).Handler())
	t.Cleanup(srv2.Close)
	c := client.NewTCP(srv2.URL, "")
	cctx, ccancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	var names []string
	go func() {
		done <- c.FollowLogs(cctx, client.LogQuery{Sandbox: "a", AfterSeq: 41, Limit: 5}, func(e audit.Event) error {
			names = append(names, e.DNS.QName)
			if len(names) == 2 {
				ccancel()
			}
			return nil
		})
	}()
	<-fb.following
	for i, sb := range []string{"a", "b", "a"} {
		e := audit.New(audit.KindDNS, sb)
		e.DNS = &audit.DNS{QName: fmt.Sprintf("c%d.example.test", i)}
		fb.follow <- e
	}
	if err := <-done; err != nil {
		t.Fatalf("FollowLogs after cancel: %v", err)
	}
	if diff := cmp.Diff([]string{"c0.example.test", "c2.example.test"}, names); diff != "" {
		t.Errorf("followed (-want +got):\n%s", diff)
	}
	if fb.followQ.AfterSeq != 41 || fb.followQ.Limit != 0 {
		t.Errorf("backend got query %+v, want after_seq 41 and no limit", fb.followQ)
	}

	bad, err := http.Get(srv.URL + "/v1/logs?follow=yes")
	if err != nil {
		t.Fatal(err)
	}
	bad.Body.Close()
	if bad.StatusCode != http.StatusBadRequest {
		t.Errorf("follow=yes: status %d, want 400", bad.StatusCode)
	}
}

func TestAPIBearerToken(t *testing.T) {
	const tok = "0123456789abcdef0123"
	h := (&API{Backend: newFake(), Token: tok}).Handler()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTPServer(h)
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	base := "http://" + l.Addr().String()
	ctx := context.Background()
	if _, err := client.NewTCP(base, "wrong-token-xxxxxxxx").List(ctx); !client.IsCode(err, client.CodeUnauthorized) {
		t.Errorf("wrong token: %v, want unauthorized", err)
	}
	if _, err := client.NewTCP(base, "").List(ctx); !client.IsCode(err, client.CodeUnauthorized) {
		t.Errorf("no token: %v, want unauthorized", err)
	}
	if _, err := client.NewTCP(base, tok).List(ctx); err != nil {
		t.Errorf("right token: %v", err)
	}
}

func TestListenUnixMode(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "run", "a.sock")
	l, err := ListenUnix(sock, "")
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o660 || st.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket mode = %v, want socket 0660", st.Mode())
	}
	// A second appliance on the same socket is refused while the first lives.
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if _, err := ListenUnix(sock, ""); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second listener: %v, want in-use error", err)
	}
	l.Close()
	// A stale socket file (no listener) is replaced.
	os.WriteFile(sock, nil, 0o600)
	l2, err := ListenUnix(sock, "")
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	l2.Close()
}

func TestClientExplainsMissingAppliance(t *testing.T) {
	c := client.New(filepath.Join(t.TempDir(), "none.sock"))
	_, err := c.List(context.Background())
	if err == nil || !strings.Contains(err.Error(), "airlock serve") {
		t.Errorf("err = %v, want a hint to start airlock serve", err)
	}
}
