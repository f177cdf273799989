package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock/client"
)

// fakePreviewAPI answers the preview routes on a unix socket and keeps
// what expose was sent.
func fakePreviewAPI(t *testing.T) (string, *client.ExposeRequest) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	got := &client.ExposeRequest{}
	p := client.Preview{ID: "pv0123456789abcdef", Sandbox: "sb1", Port: 5173, To: []string{"alice"}, By: "local",
		Expires: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), URL: "https://pv0123456789abcdef.preview.example.test/"}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes/sb1/previews", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(got)
		q := p
		q.Links = map[string]string{"alice": p.URL + "?airlock_preview_token=t"}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(q)
	})
	mux.HandleFunc("GET /v1/sandboxes/sb1/previews", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode([]client.Preview{p})
	})
	mux.HandleFunc("DELETE /v1/sandboxes/sb1/previews/pv0123456789abcdef", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock, got
}

func runPreviewCmd(t *testing.T, args ...string) (string, error) {
	var out bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetArgs(args)
	defer rootCmd.SetOut(nil)
	err := rootCmd.Execute()
	return out.String(), err
}

func TestSandboxExposeCommands(t *testing.T) {
	sock, got := fakePreviewAPI(t)
	out, err := runPreviewCmd(t, "sandbox", "expose", "--socket", sock, "sb1", "5173", "--ttl", "2h", "--to", "alice", "--name", "vite")
	if err != nil || got.Port != 5173 || got.TTL != "2h" || len(got.To) != 1 || got.To[0] != "alice" || got.Name != "vite" {
		t.Fatalf("expose: %v, sent %+v", err, got)
	}
	if !strings.Contains(out, "preview pv0123456789abcdef of port 5173") || !strings.Contains(out, "alice: https://pv0123456789abcdef.preview.example.test/?airlock_preview_token=t") {
		t.Errorf("expose printed %q", out)
	}
	out, err = runPreviewCmd(t, "sandbox", "previews", "--socket", sock, "sb1")
	if err != nil || !strings.Contains(out, "pv0123456789abcdef") || !strings.Contains(out, "5173") {
		t.Errorf("previews: %v %q", err, out)
	}
	out, err = runPreviewCmd(t, "sandbox", "unexpose", "--socket", sock, "sb1", "pv0123456789abcdef")
	if err != nil || !strings.Contains(out, "revoked pv0123456789abcdef") {
		t.Errorf("unexpose: %v %q", err, out)
	}
	if _, err := runPreviewCmd(t, "sandbox", "expose", "--socket", sock, "sb1", "80x"); err == nil || !strings.Contains(err.Error(), "port") {
		t.Errorf("bad port: %v", err)
	}
}
