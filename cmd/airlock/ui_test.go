package main

import (
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
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
	srv := httptest.NewServer(uiProxy(sock, "k3y"))
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
