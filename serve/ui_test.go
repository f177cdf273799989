package serve

import (
	"airlock/internal/cdptest"
	"context"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"airlock/audit"
	"airlock/client"
)

// uiFake is the API's fake backend with a kill switch and reports.
type uiFake struct {
	*fakeBackend
	lock client.LockdownState
}

func (u *uiFake) LockdownState(context.Context) (client.LockdownState, error) { return u.lock, nil }

func (u *uiFake) SetLockdown(context.Context, client.LockdownRequest, string) (client.LockdownState, error) {
	return u.lock, nil
}

func (u *uiFake) ReportHTML(_ context.Context, id string, w io.Writer) error {
	_, err := io.WriteString(w, "<html><body><h1>report of "+id+"</h1></body></html>")
	return err
}

func uiArtifactDir(t *testing.T) string {
	t.Helper()
	base := os.Getenv("AIRLOCK_ARTIFACTS")
	if base == "" {
		base = filepath.Join(os.TempDir(), "airlock-artifacts")
	}
	dir := filepath.Join(base, "ui")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLiveViewInChromium loads the live view in headless Chromium from the
// real API handler: it lists the sandboxes with report links, the lockdown
// banner and the stored denial, and a denial emitted after the page opened
// its event stream appears on the page with its rule and reason.
func TestLiveViewInChromium(t *testing.T) {
	if _, err := os.Stat("/usr/bin/chromium"); err != nil {
		t.Skip("chromium is not installed at /usr/bin/chromium (make setup installs it)")
	}
	fb := newFake()
	fb.sandboxes["sb-alpha"] = client.Sandbox{ID: "sb-alpha", State: "running", Image: "airlock/agent:test", Policy: "default"}
	fb.sandboxes["sb-beta"] = client.Sandbox{ID: "sb-beta", State: "running", Image: "airlock/agent:test", Policy: "strict"}
	old := audit.New(audit.KindHTTP, "sb-beta")
	old.Seq, old.Verdict, old.Rule, old.Reason = 7, "deny", "default", "no category allows hooks.example.test"
	old.HTTP = &audit.HTTP{Method: "POST", Scheme: "https", Host: "hooks.example.test", Path: "/in"}
	fb.events = []audit.Event{old}
	u := &uiFake{fakeBackend: fb, lock: client.LockdownState{All: &client.LockdownEntry{By: "root (uid 0)", Reason: "incident 42", Since: time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)}}}
	stream := make(chan struct{})
	fb.following, fb.follow = stream, make(chan audit.Event, 4)
	go func() {
		select {
		case <-stream:
		case <-time.After(60 * time.Second):
			return
		}
		time.Sleep(300 * time.Millisecond) // after the page has rendered what it loaded
		e := audit.New(audit.KindFlow, "sb-alpha")
		e.Seq, e.Verdict, e.Rule, e.Reason = 9, "deny", "deny.hosts[0] (/etc/airlock/policies/default.toml:12:3)", "metadata address refused"
		e.Flow = &audit.Flow{Stage: "decision", Host: "169.254.169.254", OrigDst: "169.254.169.254:80"}
		fb.follow <- e
	}()
	srv := httptest.NewServer((&API{Backend: u}).Handler())
	t.Cleanup(srv.Close) // after Chromium (cleanups run last first): it holds the stream open

	art := uiArtifactDir(t)
	shot := filepath.Join(art, "live-view.png")
	os.Remove(shot)
	c := cdptest.Start(t, 1280, 900)
	c.Navigate(srv.URL + "/ui/")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if !c.WaitFor(ctx, `document.querySelector('#denials tr[data-seq="9"]')`) {
		t.Errorf("the denial emitted after load never appeared (state %q)", c.Eval("document.body.dataset.state"))
	}
	dom := c.Eval("document.documentElement.outerHTML")
	for _, want := range []string{
		`data-state="loaded"`, `data-stream="open"`, `data-lockdown="all"`, "LOCKDOWN: every sandbox is cut off", "incident 42",
		`<a href="/ui/report/sb-alpha">report</a>`, `<a href="/ui/report/sb-beta">report</a>`, "cut (lockdown)",
		"POST hooks.example.test/in", "no category allows hooks.example.test",
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	live := regexp.MustCompile(`<tr data-seq="9" data-live="1"[^>]*>(.*?)</tr>`).FindStringSubmatch(dom)
	if live == nil || !strings.Contains(live[1], "deny.hosts[0] (/etc/airlock/policies/default.toml:12:3)") ||
		!strings.Contains(live[1], "metadata address refused") || !strings.Contains(live[1], "sb-alpha") {
		t.Errorf("the denial emitted after load is not on the page: %q", live)
	}
	// Nothing but the appliance was asked for: no external resources.
	if ext := c.Eval(`performance.getEntriesByType("resource").map(e => e.name).filter(n => !n.startsWith(location.origin)).join(" ")`); ext != "" {
		t.Errorf("the page loaded external resources: %s", ext)
	}
	if t.Failed() {
		t.Logf("DOM:\n%.4000s", dom)
	}
	c.Screenshot(shot)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	if img, err := png.Decode(f); err != nil || img.Bounds().Dx() != 1280 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("live view screenshot: %s", shot)
}

// The page and its assets come from the embedded files with a
// self-only CSP; each sandbox's report renders through ReportBackend.
func TestUIRoutes(t *testing.T) {
	u := &uiFake{fakeBackend: newFake()}
	srv := httptest.NewServer((&API{Backend: u, Token: "0123456789abcdef"}).Handler())
	defer srv.Close()
	get := func(path string, auth bool) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if auth {
			req.Header.Set("Authorization", "Bearer 0123456789abcdef")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	if code, _, _ := get("/ui/", false); code != http.StatusUnauthorized {
		t.Errorf("the page without the token: %d, want 401", code)
	}
	code, h, body := get("/ui/", true)
	if code != 200 || !strings.Contains(body, `<script src="ui.js"`) || !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("page: %d %q %v", code, body, h)
	}
	for _, asset := range []string{"/ui/ui.js", "/ui/ui.css"} {
		if code, _, body := get(asset, true); code != 200 || len(body) < 100 {
			t.Errorf("%s: %d", asset, code)
		}
	}
	if code, h, body := get("/ui/report/sb-7", true); code != 200 || body != "<html><body><h1>report of sb-7</h1></body></html>" ||
		!strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Errorf("report: %d %q", code, body)
	}
	// A backend without reports says so.
	srv2 := httptest.NewServer((&API{Backend: newFake()}).Handler())
	defer srv2.Close()
	resp, err := http.Get(srv2.URL + "/ui/report/sb-7")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("report without ReportBackend: %d, want 501", resp.StatusCode)
	}
}
