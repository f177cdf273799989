package serve

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"airlock/audit"
	"airlock/certs"
	"airlock/client"
)

// reportFake adds reports and access requests to the fake backend, so the
// isolation tests reach every kind of route. Its creates take a while, as
// real ones do, so concurrent creates overlap.
type reportFake struct{ *fakeBackend }

func (f reportFake) Create(ctx context.Context, req client.CreateRequest) (client.Sandbox, error) {
	time.Sleep(20 * time.Millisecond)
	return f.fakeBackend.Create(ctx, req)
}

func (f reportFake) Explain(context.Context, string, string) (client.Explanation, error) {
	return client.Explanation{Action: "allow"}, nil
}

func (f reportFake) RequestAccess(_ context.Context, id string, _ client.AccessRequest) (client.Approval, error) {
	if _, err := f.lookup(id); err != nil {
		return client.Approval{}, err
	}
	return client.Approval{ID: "ap-x", Sandbox: id, State: "held"}, nil
}

func (f reportFake) Report(_ context.Context, id string, _ bool, w io.Writer) error {
	_, err := fmt.Fprintf(w, "report of %s", id)
	return err
}

// principalWorld is a TLS control listener (certificate minted from a
// test appliance CA) with principals from a file, and clients for them.
type principalWorld struct {
	t      *testing.T
	fb     *fakeBackend
	api    *API
	file   string
	store  *principalStore
	ca     *certs.CA
	base   string
	events *eventLog
	logBuf *syncBuffer
	tokens map[string]string // principal -> token
	admin  string            // control.token_file's token
}

// principalEntry renders one [principals.NAME] table.
func principalEntry(name, token string, scopes []string, quota string) string {
	return fmt.Sprintf("[principals.%s]\ntoken_sha256 = %q\nscopes = [\"%s\"]\n%s\n", name, TokenHash(token),
		strings.Join(scopes, `", "`), quota)
}

func startPrincipals(t *testing.T, body string, tokens map[string]string) *principalWorld {
	t.Helper()
	dir := t.TempDir()
	w := &principalWorld{t: t, fb: newFake(), file: filepath.Join(dir, "principals.toml"), events: &eventLog{},
		logBuf: &syncBuffer{}, tokens: tokens, admin: "admin-token-0123456789abcdef"}
	w.write(body)
	log := slog.New(slog.NewTextHandler(w.logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var err error
	if w.store, err = newPrincipalStore(w.file, w.admin, log); err != nil {
		t.Fatal(err)
	}
	if w.ca, err = certs.Open(filepath.Join(dir, "state")); err != nil {
		t.Fatal(err)
	}
	tcfg, _, err := controlTLS(Control{}, w.ca)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	api := &API{Backend: reportFake{w.fb}, Log: log, Principals: w.store, Events: w.events,
		Defaults: Defaults{Policy: "default", Image: "busybox", Lifetime: 4 * time.Hour, ExecTimeout: 10 * time.Minute}}
	w.api = api
	srv := NewHTTPServer(api.Handler())
	go srv.Serve(tls.NewListener(l, tcfg))
	t.Cleanup(func() { srv.Close() })
	w.base = "https://" + l.Addr().String()
	return w
}

func (w *principalWorld) write(body string) {
	w.t.Helper()
	if err := os.WriteFile(w.file, []byte("version = 1\n\n"+body), 0o600); err != nil {
		w.t.Fatal(err)
	}
}

func (w *principalWorld) client(token string) *client.Client {
	w.t.Helper()
	c, err := client.NewRemote(w.base, token, client.TLSOptions{CAPEM: w.ca.CertPEM()})
	if err != nil {
		w.t.Fatal(err)
	}
	return c
}

func (w *principalWorld) as(name string) *client.Client { return w.client(w.tokens[name]) }

// refusals returns the refusal events recorded so far.
func (w *principalWorld) refusals() []audit.Event {
	w.events.mu.Lock()
	defer w.events.mu.Unlock()
	var out []audit.Event
	for _, e := range w.events.ev {
		if e.Kind == audit.KindRefusal {
			out = append(out, e)
		}
	}
	return out
}

func (w *principalWorld) wantRefusal(principal, action, reason string, status int) {
	w.t.Helper()
	for _, e := range w.refusals() {
		r := e.Refusal
		if r.Principal == principal && r.Action == action && r.Status == status && strings.Contains(e.Reason, reason) {
			return
		}
	}
	w.t.Errorf("no refusal event for %q %s (%d, %q); have %d refusals", principal, action, status, reason, len(w.refusals()))
}

func allScopes() []string {
	return []string{ScopeCreate, ScopeExec, ScopeFiles, ScopeAttach, ScopeApprove, ScopeLogs}
}

// tenPrincipals: p0..p9, each with every scope but admin and a quota of 5.
func tenPrincipals() (string, map[string]string) {
	var b strings.Builder
	toks := map[string]string{}
	for i := range 10 {
		name := fmt.Sprintf("p%d", i)
		tok, _ := NewToken()
		toks[name] = tok
		b.WriteString(principalEntry(name, tok, allScopes(), "[principals."+name+".quota]\nsandboxes = 5\n"))
	}
	return b.String(), toks
}

// TestPrincipalsIsolation: 10 principals create 6 sandboxes each at once
// with a quota of 5: exactly 5 each succeed and the 6th gets 429; each
// then sees and touches only its own; the admin sees all 50.
func TestPrincipalsIsolation(t *testing.T) {
	body, toks := tenPrincipals()
	w := startPrincipals(t, body, toks)
	ctx := context.Background()
	owned := map[string][]string{}
	var mu sync.Mutex
	var over atomic.Int32
	var wg sync.WaitGroup
	for name := range toks {
		c := w.as(name)
		for range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sb, err := c.Create(ctx, client.CreateRequest{})
				if client.IsCode(err, client.CodeQuotaExceeded) {
					over.Add(1)
					return
				}
				if err != nil {
					t.Errorf("%s create: %v", name, err)
					return
				}
				mu.Lock()
				owned[name] = append(owned[name], sb.ID)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if over.Load() != 10 {
		t.Errorf("%d creates got 429, want 10 (one per principal)", over.Load())
	}
	for name, ids := range owned {
		if len(ids) != 5 {
			t.Errorf("%s got %d sandboxes, want 5", name, len(ids))
		}
		w.wantRefusal(name, "POST /v1/sandboxes", "quota.sandboxes", 429)
	}
	for name := range toks {
		checkOwnView(t, w, name, owned)
	}
	all, err := w.client(w.admin).List(ctx)
	if err != nil || len(all) != 50 {
		t.Fatalf("admin lists %d sandboxes (%v), want 50", len(all), err)
	}
	if _, err := w.client(w.admin).Get(ctx, owned["p3"][0]); err != nil {
		t.Errorf("admin get of p3's sandbox: %v", err)
	}
}

// checkOwnView: name lists exactly its own sandboxes, reaches them, and
// gets "not found" for every route on a neighbour's.
func checkOwnView(t *testing.T, w *principalWorld, name string, owned map[string][]string) {
	t.Helper()
	ctx := context.Background()
	c := w.as(name)
	list, err := c.List(ctx)
	if err != nil || len(list) != 5 {
		t.Fatalf("%s lists %d sandboxes (%v), want its 5", name, len(list), err)
	}
	for _, sb := range list {
		if !contains(owned[name], sb.ID) {
			t.Errorf("%s sees %s, not its own", name, sb.ID)
		}
		if sb.Owner != name {
			t.Errorf("%s lists %s with owner %q", name, sb.ID, sb.Owner)
		}
	}
	mine := owned[name][0]
	if got, err := c.Get(ctx, mine); err != nil || got.Owner != name {
		t.Errorf("%s gets its own %s with owner %q (%v)", name, mine, got.Owner, err)
	}
	if _, err := c.Exec(ctx, mine, client.ExecRequest{Argv: []string{"true"}}, io.Discard, io.Discard); err != nil {
		t.Errorf("%s exec in its own sandbox: %v", name, err)
	}
	var rep bytes.Buffer
	if err := c.Report(ctx, mine, false, &rep); err != nil || !strings.Contains(rep.String(), mine) {
		t.Errorf("%s report of its own: %q, %v", name, rep.String(), err)
	}
	other := owned[neighbour(name)][0]
	for what, call := range isolationCalls(c, other) {
		if err := call(ctx); !client.IsCode(err, client.CodeNotFound) {
			t.Errorf("%s %s on %s's sandbox: %v, want not_found", name, what, neighbour(name), err)
		}
	}
	for _, act := range []string{"exec", "resume", "shell", "fs/file"} {
		method := "POST"
		if act == "fs/file" {
			method = "GET"
		}
		w.wantRefusal(name, method+" /v1/sandboxes/"+other+"/"+act, "another principal", 404)
	}
	w.wantRefusal(name, "DELETE /v1/sandboxes/"+other, "another principal", 404)
}

func isolationCalls(c *client.Client, id string) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"get": func(ctx context.Context) error { _, err := c.Get(ctx, id); return err },
		"exec": func(ctx context.Context) error {
			_, err := c.Exec(ctx, id, client.ExecRequest{Argv: []string{"true"}}, io.Discard, io.Discard)
			return err
		},
		"read file": func(ctx context.Context) error { _, err := c.ReadFile(ctx, id, "/etc/passwd", io.Discard); return err },
		"copy out":  func(ctx context.Context) error { return c.CopyOut(ctx, id, "/workspace", io.Discard) },
		"events":    func(ctx context.Context) error { return c.Logs(ctx, client.LogQuery{Sandbox: id}, nopEvent) },
		"report":    func(ctx context.Context) error { return c.Report(ctx, id, true, io.Discard) },
		"summary":   func(ctx context.Context) error { _, err := c.Summary(ctx, id); return err },
		"delete":    func(ctx context.Context) error { return c.Delete(ctx, id) },
		"pause":     func(ctx context.Context) error { return c.Pause(ctx, id) },
		"resume":    func(ctx context.Context) error { return c.Resume(ctx, id) },
		"shell":     func(ctx context.Context) error { return tryShell(c, id) },
		"access": func(ctx context.Context) error {
			_, err := c.RequestAccess(ctx, id, client.AccessRequest{Destination: "hooks.example.test"})
			return err
		},
		"expose": func(ctx context.Context) error {
			_, err := c.Expose(ctx, id, client.ExposeRequest{Port: 80})
			return err
		},
		"previews": func(ctx context.Context) error { _, err := c.Previews(ctx, id); return err },
		"unexpose": func(ctx context.Context) error { return c.Unexpose(ctx, id, "pv0000000000000000") },
	}
}

func nopEvent(audit.Event) error { return nil }

func neighbour(name string) string { return fmt.Sprintf("p%d", (int(name[1]-'0')+1)%10) }

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// TestPrincipalsEventsAndApprovals: events without a sandbox filter are
// only the caller's; held requests of another's sandbox are invisible and
// cannot be decided.
func TestPrincipalsEventsAndApprovals(t *testing.T) {
	body, toks := tenPrincipals()
	w := startPrincipals(t, body, toks)
	ctx := context.Background()
	a, err := w.as("p0").Create(ctx, client.CreateRequest{}) // sb-1: the fake's approval is for it
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.as("p1").Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a.ID, b.ID, ""} {
		e := audit.New(audit.KindDNS, id)
		e.DNS = &audit.DNS{QName: "n.example.test"}
		w.fb.events = append(w.fb.events, e)
	}
	var seen []string
	if err := w.as("p1").Logs(ctx, client.LogQuery{}, func(e audit.Event) error { seen = append(seen, e.Sandbox); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != b.ID {
		t.Errorf("p1's events are of %q, want only %s", seen, b.ID)
	}
	if as, err := w.as("p1").Approvals(ctx); err != nil || len(as) != 0 {
		t.Errorf("p1 sees approvals %v (%v), want none", as, err)
	}
	if _, err := w.as("p1").Decide(ctx, "ap-1", client.Decision{Approve: true}); !client.IsCode(err, client.CodeNotFound) {
		t.Errorf("p1 decides p0's request: %v, want not_found", err)
	}
	w.wantRefusal("p1", "POST /v1/approvals/ap-1", "another principal", 404)
	if as, err := w.as("p0").Approvals(ctx); err != nil || len(as) != 1 {
		t.Errorf("p0 sees approvals %v (%v), want its one", as, err)
	}
	ap, err := w.as("p0").Decide(ctx, "ap-1", client.Decision{Approve: true})
	if err != nil || ap.State != "approved" || !strings.HasPrefix(ap.DecidedBy, "p0@127.0.0.1:") {
		t.Errorf("p0 decides its own request: %+v, %v; want approved by p0@ADDR", ap, err)
	}
}

// TestPrincipalScopes: each route needs its scope; a refusal is a 403
// and an event naming principal, action and reason.
func TestPrincipalScopes(t *testing.T) {
	ro, _ := NewToken()
	ex, _ := NewToken()
	body := principalEntry("viewer", ro, []string{ScopeLogs}, "") +
		principalEntry("runner", ex, []string{ScopeCreate, ScopeExec}, "")
	w := startPrincipals(t, body, map[string]string{"viewer": ro, "runner": ex})
	ctx := context.Background()
	if _, err := w.as("viewer").Create(ctx, client.CreateRequest{}); !client.IsCode(err, client.CodeForbidden) {
		t.Fatalf("viewer create: %v, want forbidden", err)
	}
	w.wantRefusal("viewer", "POST /v1/sandboxes", "missing scope sandbox:create", 403)
	sb, err := w.as("runner").Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"read file": func() error { _, err := w.as("runner").ReadFile(ctx, sb.ID, "/x", io.Discard); return err }(),
		"reload":    func() error { _, err := w.as("runner").ReloadPolicies(ctx); return err }(),
		"lockdown":  func() error { _, err := w.as("runner").SetLockdown(ctx, client.LockdownRequest{}); return err }(),
		"decide":    func() error { _, err := w.as("runner").Decide(ctx, "ap-1", client.Decision{}); return err }(),
		"logs":      w.as("runner").Logs(ctx, client.LogQuery{}, nopEvent),
		"tty":       tryTTY(w.as("runner"), sb.ID),
		"shell":     tryShell(w.as("runner"), sb.ID),
	} {
		if !client.IsCode(err, client.CodeForbidden) {
			t.Errorf("runner %s: %v, want forbidden", what, err)
		}
	}
	w.wantRefusal("runner", "POST /v1/policies/reload", "missing scope admin", 403)
	w.wantRefusal("runner", "POST /v1/sandboxes/"+sb.ID+"/exec", "missing scope attach", 403)
	w.wantRefusal("runner", "POST /v1/sandboxes/"+sb.ID+"/shell", "missing scope attach", 403)
	if _, err := w.as("runner").Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"true"}}, io.Discard, io.Discard); err != nil {
		t.Errorf("runner exec: %v", err)
	}
	if _, err := w.as("viewer").Health(ctx); err != nil {
		t.Errorf("health needs no scope: %v", err)
	}
}

func tryShell(c *client.Client, id string) error {
	_, err := c.Shell(context.Background(), id, client.ExecRequest{}, strings.NewReader(""), io.Discard, nil)
	return err
}

func tryTTY(c *client.Client, id string) error {
	_, err := c.ExecTTY(context.Background(), id, client.ExecRequest{Argv: []string{"sh"}, TTY: true}, strings.NewReader(""), io.Discard, nil)
	return err
}

// TestPrincipalTokens: a missing, wrong or revoked token is a 401 and an
// event; no token ever reaches the log or the events.
func TestPrincipalTokens(t *testing.T) {
	tok, _ := NewToken()
	w := startPrincipals(t, principalEntry("ci", tok, []string{ScopeLogs}, ""), map[string]string{"ci": tok})
	ctx := context.Background()
	wrong := "alk_" + strings.Repeat("x", 43)
	for name, c := range map[string]*client.Client{"none": w.client(""), "wrong": w.client(wrong), "hash as token": w.client(TokenHash(tok))} {
		if _, err := c.List(ctx); !client.IsCode(err, client.CodeUnauthorized) {
			t.Errorf("%s: %v, want unauthorized", name, err)
		}
	}
	w.wantRefusal("", "GET /v1/sandboxes", "no bearer token", 401)
	w.wantRefusal("", "GET /v1/sandboxes", "unknown or revoked token", 401)
	if _, err := w.as("ci").List(ctx); err != nil {
		t.Fatalf("right token: %v", err)
	}
	if _, err := w.client(w.admin).List(ctx); err != nil {
		t.Fatalf("control.token_file's token: %v", err)
	}
	var evs bytes.Buffer
	for _, e := range w.refusals() {
		fmt.Fprintf(&evs, "%+v %+v\n", e, *e.Refusal)
	}
	for _, secret := range []string{tok, wrong, w.admin} {
		if strings.Contains(w.logBuf.String(), secret) || strings.Contains(evs.String(), secret) {
			t.Errorf("a token reached the log or the events")
		}
	}
}

// TestPrincipalsReload: a reload revokes a token without a restart; a
// broken file keeps the running principals and says why.
func TestPrincipalsReload(t *testing.T) {
	a, _ := NewToken()
	b, _ := NewToken()
	w := startPrincipals(t, principalEntry("a", a, []string{ScopeLogs}, "")+principalEntry("b", b, []string{ScopeLogs}, ""),
		map[string]string{"a": a, "b": b})
	ctx := context.Background()
	if _, err := w.as("b").List(ctx); err != nil {
		t.Fatal(err)
	}
	w.write(principalEntry("a", a, []string{ScopeLogs}, ""))
	if err := w.store.Reload("test"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.as("b").List(ctx); !client.IsCode(err, client.CodeUnauthorized) {
		t.Errorf("revoked b: %v, want unauthorized", err)
	}
	w.write("[principals.a]\ntoken_sha256 = \"nothex\"\nscopes = [\"logs:read\"]\n")
	err := w.store.Reload("test")
	if err == nil || !strings.Contains(err.Error(), "principals.toml:4:1: principals.a: token_sha256 must be 64 hex digits") {
		t.Errorf("broken reload: %v, want the positioned error", err)
	}
	if !strings.Contains(w.logBuf.String(), "principals file rejected; the running principals stay") {
		t.Errorf("the rejected reload was not logged:\n%s", w.logBuf.String())
	}
	if _, err := w.as("a").List(ctx); err != nil {
		t.Errorf("a after a broken reload: %v, want the old principals kept", err)
	}
}

// TestPrincipalLimits: disallowed policies and images, a host workspace
// (admins only), over-limit lifetimes and timeouts are 403 with what is
// allowed; unset ones are bounded.
func TestPrincipalLimits(t *testing.T) {
	tok, _ := NewToken()
	quota := "[principals.ci.quota]\nmax_lifetime = \"1h\"\nmax_exec_timeout = \"5m\"\npolicies = [\"default\", \"coding\"]\nimages = [\"busybox\"]\n"
	w := startPrincipals(t, principalEntry("ci", tok, allScopes(), quota), map[string]string{"ci": tok})
	ctx := context.Background()
	c := w.as("ci")
	for _, tc := range []struct {
		name string
		req  client.CreateRequest
		msg  string
	}{
		{"policy", client.CreateRequest{Policy: "open"}, `may not use policy "open": allowed are default, coding`},
		{"image", client.CreateRequest{Image: "debian"}, `may not use image "debian": allowed are busybox`},
		{"template", client.CreateRequest{Template: "node"}, "may not start from a template"},
		// root would chown or read the host directory for it
		{"host workspace", client.CreateRequest{Policy: "coding", Image: "busybox", Workspace: "/etc"}, `principal "ci" may not give a host directory as workspace`},
		{"lifetime", client.CreateRequest{Lifetime: client.Duration(2 * time.Hour)}, "lifetime 2h0m0s is over principal \"ci\"'s limit of 1h0m0s"},
		{"exec timeout", client.CreateRequest{ExecTimeout: client.Duration(time.Hour)}, "exec_timeout 1h0m0s is over"},
	} {
		_, err := c.Create(ctx, tc.req)
		if !client.IsCode(err, client.CodeForbidden) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want forbidden with %q", tc.name, err, tc.msg)
		}
	}
	w.wantRefusal("ci", "POST /v1/sandboxes", "policy not allowed", 403)
	sb, err := c.Create(ctx, client.CreateRequest{Policy: "coding"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"true"}, Timeout: client.Duration(time.Hour)}, io.Discard, io.Discard); !client.IsCode(err, client.CodeForbidden) {
		t.Errorf("exec over the limit: %v, want forbidden", err)
	}
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"true"}, Timeout: client.Duration(time.Minute)}, io.Discard, io.Discard); err != nil {
		t.Errorf("exec within the limit: %v", err)
	}
}

// fullFake is an appliance at sandbox.max.
type fullFake struct{ *fakeBackend }

func (fullFake) Create(context.Context, client.CreateRequest) (client.Sandbox, error) {
	return client.Sandbox{}, client.Errorf(client.CodeQuotaExceeded, "the appliance runs its maximum of 2 sandboxes (sandbox.max)")
}

// TestApplianceQuotaIsARefusal: the appliance's own limit (sandbox.max)
// is a refusal event too, naming the principal (here the socket's).
func TestApplianceQuotaIsARefusal(t *testing.T) {
	ev := &eventLog{}
	api := &API{Backend: fullFake{newFake()}, Events: ev}
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	if _, err := client.NewTCP(srv.URL, "").Create(context.Background(), client.CreateRequest{}); !client.IsCode(err, client.CodeQuotaExceeded) {
		t.Fatalf("create: %v", err)
	}
	if len(ev.ev) != 1 || ev.ev[0].Refusal == nil || ev.ev[0].Refusal.Principal != "local" || ev.ev[0].Refusal.Status != 429 ||
		ev.ev[0].Reason != "sandbox.max reached" {
		t.Errorf("events %+v, want one refusal of local, 429, sandbox.max reached", ev.ev)
	}
}

// TestPrincipalLimitsBoundDefaults: an unset lifetime becomes the
// shorter of the default and the principal's maximum.
func TestPrincipalLimitsBoundDefaults(t *testing.T) {
	p := &Principal{Name: "ci", Quota: Quota{MaxLifetime: Duration{time.Hour}, MaxExecTimeout: Duration{time.Hour}}}
	a := &API{Defaults: Defaults{Lifetime: 4 * time.Hour, ExecTimeout: time.Minute}}
	req := client.CreateRequest{}
	if e, _ := a.createLimits(p, &req); e != nil {
		t.Fatal(e)
	}
	if time.Duration(req.Lifetime) != time.Hour || time.Duration(req.ExecTimeout) != time.Minute {
		t.Errorf("bounded to lifetime %s, exec timeout %s; want 1h, 1m", time.Duration(req.Lifetime), time.Duration(req.ExecTimeout))
	}
}

// TestUnixCallerIsLocalAdmin: without tokens (the unix socket) the
// caller is the admin "local" and sees every sandbox, owned or not.
func TestUnixCallerIsLocalAdmin(t *testing.T) {
	body, toks := tenPrincipals()
	w := startPrincipals(t, body, toks)
	ctx := context.Background()
	if _, err := w.as("p0").Create(ctx, client.CreateRequest{}); err != nil {
		t.Fatal(err)
	}
	c, _ := startAPI(t, w.fb, "")
	list, err := c.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("local lists %v (%v), want p0's sandbox", list, err)
	}
}

// TestControlTLSClients: the Go client verifies the minted certificate
// by the CA bundle or a pinned fingerprint (the CA's or the leaf's), and
// refuses a wrong pin or an unknown CA.
func TestControlTLSClients(t *testing.T) {
	tok, _ := NewToken()
	w := startPrincipals(t, principalEntry("ci", tok, []string{ScopeLogs}, ""), map[string]string{"ci": tok})
	ctx := context.Background()
	caFP := Fingerprint(w.ca.Certificate().Raw)
	leafFP := leafFingerprint(t, w.base)
	for _, tc := range []struct {
		name string
		opts client.TLSOptions
		ok   bool
	}{
		{"ca bundle", client.TLSOptions{CAPEM: w.ca.CertPEM()}, true},
		{"pinned ca", client.TLSOptions{Fingerprint: caFP}, true},
		{"pinned ca with colons", client.TLSOptions{Fingerprint: colons(strings.ToUpper(caFP))}, true},
		{"pinned leaf", client.TLSOptions{Fingerprint: leafFP}, true},
		{"wrong pin", client.TLSOptions{Fingerprint: strings.Repeat("ab", 32)}, false},
		{"system roots", client.TLSOptions{}, false},
	} {
		c, err := client.NewRemote(w.base, tok, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.List(ctx)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%t", tc.name, err, tc.ok)
		}
	}
	if _, err := client.NewRemote(strings.Replace(w.base, "https", "http", 1), tok, client.TLSOptions{}); err == nil {
		t.Error("an http:// url was accepted for the TLS listener")
	}
}

func leafFingerprint(t *testing.T, base string) string {
	t.Helper()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return Fingerprint(conn.ConnectionState().PeerCertificates[0].Raw)
}

func colons(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(s[i : i+2])
	}
	return b.String()
}

// TestExposeToUnknownPrincipal: a preview "to" a name no principal holds
// was made anyway, so its link named someone who never had it in every
// ingress event. It is refused, naming the entry.
func TestExposeToUnknownPrincipal(t *testing.T) {
	body, toks := tenPrincipals()
	w := startPrincipals(t, body, toks)
	var known string
	for name := range toks {
		known = name
		break
	}
	if err := w.api.checkPrincipalNames([]string{known, "local"}); err != nil {
		t.Errorf("known names refused: %v", err)
	}
	err := w.api.checkPrincipalNames([]string{known, "mallory"})
	if !client.IsCode(err, client.CodeInvalid) || !strings.Contains(err.Error(), `to[1]: no principal named "mallory"`) {
		t.Errorf("unknown name: %v, want invalid naming to[1]", err)
	}
	if err := (&API{}).checkPrincipalNames([]string{"alice"}); !client.IsCode(err, client.CodeInvalid) {
		t.Errorf("no principals configured: %v, want invalid", err)
	}
}
