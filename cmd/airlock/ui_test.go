//go:build !airlock_thin

package main

import (
	"context"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/client"
	"airlock/serve"
)

// The ui proxy passes only keyed GETs to the socket and never forwards the
// key itself.
func TestUIProxy(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 8)
	api := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Method + " " + r.URL.Path + " cookie=" + r.Header.Get("Cookie")
		io.WriteString(w, "from the socket")
	})}
	go api.Serve(ul)
	defer api.Close()
	srv := httptest.NewServer(uiProxy(uiUpstream{socket: sock}, "k3y"))
	defer srv.Close()

	get := func(c *http.Client, path string) (int, string) {
		t.Helper()
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(http.DefaultClient, "/ui/"); code != http.StatusUnauthorized {
		t.Errorf("without the key: %d, want 401", code)
	}
	if code, _ := get(http.DefaultClient, "/ui/?key=wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong key: %d, want 401", code)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	if code, body := get(c, "/ui/?key=k3y"); code != 200 || body != "from the socket" {
		t.Fatalf("with the key: %d %q", code, body)
	}
	if got := <-seen; got != "GET /ui/ cookie=" {
		t.Errorf("socket saw %q, want the page without the key cookie", got)
	}
	if code, _ := get(c, "/v1/events/stream"); code != 200 {
		t.Errorf("event stream through the proxy: %d", code)
	}
	<-seen
	if code, _ := get(c, "/metrics"); code != http.StatusNotFound {
		t.Errorf("outside /ui/ and /v1/: %d, want 404", code)
	}
	for _, p := range []string{"/v1/sandboxes/abc/fs/file?path=/etc/passwd", "/v1/sandboxes/abc/artifacts", "/v1/sandboxes/abc/processes/x/attach", "/v1/sandboxes/abc/files", "/v1/sandboxesx"} {
		if code, _ := get(c, p); code != http.StatusNotFound {
			t.Errorf("%s through the live view: %d, want 404 (the page never reads it)", p, code)
		}
	}
	resp, err := c.Post(srv.URL+"/v1/lockdown", "application/json", strings.NewReader(`{"lift":true,"reason":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST through the read-only view: %d, want 405", resp.StatusCode)
	}
	select {
	case s := <-seen:
		t.Errorf("the socket saw %q", s)
	default:
	}
}

// TestUIProxyTCP: over the control API's TCP listener, which speaks TLS
// and takes only bearer requests (a browser sent straight there gets 401),
// the live view checks the listener's certificate by --ca-file, adds the
// token from --token-file to what it passes on, and the page loads;
// --url and --token-file go together, and a plain http:// URL is refused.
func TestUIProxyTCP(t *testing.T) {
	t.Setenv("AIRLOCK_TOKEN", "")
	const tok = "0123456789abcdef-ui"
	api := httptest.NewTLSServer((&serve.API{Backend: storeBackend{}, Token: tok}).Handler())
	defer api.Close()
	base := api.URL
	if resp, err := api.Client().Get(base + "/ui/"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the page straight from the TCP listener: %v %v, want 401", resp, err)
	}
	dir := t.TempDir()
	tf := filepath.Join(dir, "token")
	if err := os.WriteFile(tf, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw})
	opts := client.TLSOptions{CAPEM: ca}
	if _, err := uiTarget(base, tf, client.TLSOptions{}); err != nil {
		t.Fatal(err)
	}
	if up, _ := uiTarget(base, tf, client.TLSOptions{}); func() error { _, err := up.client().Health(context.Background()); return err }() == nil {
		t.Fatal("health over TCP without the listener's CA: no error, want a certificate error")
	}
	up, err := uiTarget(base, tf, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up.client().Health(context.Background()); err != nil {
		t.Fatalf("health over TCP: %v", err)
	}
	view := httptest.NewServer(uiProxy(up, "k3y"))
	defer view.Close()
	jar, _ := cookiejar.New(nil)
	req, _ := http.NewRequest("GET", view.URL+"/ui/?key=k3y", nil)
	req.Header.Set("Authorization", "Bearer not-the-token") // replaced, never passed on
	resp, err := (&http.Client{Jar: jar}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(strings.ToLower(string(b)), "<html") {
		t.Fatalf("the page through airlock ui over TCP: %d %.200q", resp.StatusCode, b)
	}
	plain := "http://" + strings.TrimPrefix(base, "https://")
	for _, bad := range [][2]string{{base, ""}, {"", tf}, {"ftp://x", tf}, {base + "/v1", tf}, {plain, tf}} {
		if _, err := uiTarget(bad[0], bad[1], opts); err == nil {
			t.Errorf("uiTarget(%q, %q): no error", bad[0], bad[1])
		}
	}
}
