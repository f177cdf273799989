//go:build !airlock_thin

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"airlock/serve"
)

// controlServer answers each route (a method and path pattern) with its
// body on a new control socket, and returns the socket.
func controlServer(t *testing.T, routes map[string]string) string {
	t.Helper()
	mux := http.NewServeMux()
	for route, body := range routes {
		mux.HandleFunc(route, func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(body)) })
	}
	sock := filepath.Join(t.TempDir(), "a.sock")
	l, err := serve.ListenUnix(sock, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := serve.NewHTTPServer(mux)
	go srv.Serve(l)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return sock
}

// TestSandboxShowLockfiles: `sandbox show` names the lockfiles the
// sandbox was created with and their entries, and a dash when none.
func TestSandboxShowLockfiles(t *testing.T) {
	const sb = `{"id":"sb1","image":"i","policy":"p","state":"running","created":"2026-01-02T03:04:05Z"`
	var out, errb bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&errb)
	t.Cleanup(func() { rootCmd.SetOut(nil); rootCmd.SetErr(nil) })
	for _, c := range []struct{ body, want string }{
		{sb + `,"lockfiles":[{"name":"web/package-lock.json","entries":3},{"name":"requirements.txt","entries":1}]}`,
			"lockfiles      web/package-lock.json (3 entries), requirements.txt (1 entry)\n"},
		{sb + `}`, "lockfiles      -\n"},
	} {
		out.Reset()
		if code := run([]string{"sandbox", "show", "--json=false", "--socket", controlServer(t, map[string]string{"GET /v1/sandboxes/sb1": c.body}), "sb1"}); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("want %q in:\n%s", c.want, out.String())
		}
	}
}

// TestSandboxShowOlderAppliance: `sandbox show` and `sandbox ls` print the
// state, and an older appliance's "destroying" reads as ending (the wire
// bytes are that appliance's, not a Go value).
func TestSandboxShowOlderAppliance(t *testing.T) {
	const old = `{"id":"sb1","image":"localhost/airlock/busybox:1","policy":"p","address":"198.18.0.2","state":"destroying","created":"2026-01-02T03:04:05Z","owner":"alice"}`
	sock := controlServer(t, map[string]string{"GET /v1/sandboxes/sb1": old, "GET /v1/sandboxes": "[" + old + "]"})
	var out, errb bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&errb)
	t.Cleanup(func() { rootCmd.SetOut(nil); rootCmd.SetErr(nil) })
	for _, args := range [][]string{{"sandbox", "show", "--socket", sock, "sb1"}, {"sandbox", "ls", "--socket", sock}} {
		out.Reset()
		if code := run(args); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		if !strings.Contains(out.String(), "ending") || strings.Contains(out.String(), "destroying") {
			t.Errorf("%v:\n%s", args, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"sandbox", "show", "--socket", sock, "--json", "sb1"}); code != 0 {
		t.Fatal(errb.String())
	}
	var got struct{ State, Owner string }
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || got.State != "ending" || got.Owner != "alice" {
		t.Errorf("--json: %+v %v\n%s", got, err, out.String())
	}
}
