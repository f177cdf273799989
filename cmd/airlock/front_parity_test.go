//go:build !airlock_thin

package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"airlock/client/wire"
	"airlock/internal/clifront"
)

// TestFrontSendsWhatTheCLISends: every exec line the front takes itself
// (clifront.Parse) reaches the appliance as the same request when the CLI
// runs it: the front keeps its own copy of the exec flags, and this is
// what ties the two together without root (e2e/TestFrontExec compares
// their output against a real sandbox).
func TestFrontSendsWhatTheCLISends(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan wire.ExecRequest, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req wire.ExecRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !strings.HasSuffix(r.URL.Path, "/exec") {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		got <- req
		json.NewEncoder(w).Encode(wire.ExecFrame{Exit: &wire.ExecResult{ID: "x1"}})
	})}
	go srv.Serve(ln)
	defer srv.Close()
	t.Setenv("AIRLOCK_SOCKET", sock)
	empty, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	oldStdin := os.Stdin
	os.Stdin = empty
	defer func() { os.Stdin = oldStdin }()

	for _, args := range [][]string{
		{"sandbox", "exec", "abc", "--", "echo", "hi"},
		{"sandbox", "exec", "--cwd", "/tmp", "abc", "--", "pwd"},
		{"sandbox", "exec", "abc", "--cwd=/tmp", "-u", "nobody", "--", "pwd", "--cwd", "x"},
		{"sandbox", "exec", "-u", "1000:1000", "abc", "--", "id"},
		{"sandbox", "exec", "-e", "A=1", "--env=B=x=y", "--env", "C=", "abc", "--", "env"},
		{"sandbox", "exec", "--timeout", "1m30s", "--background", "abc", "--", "sleep", "9"},
		{"sandbox", "exec", "--timeout=250ms", "abc", "--", "true"},
		{"sandbox", "exec", "-i", "--socket", sock, "abc", "--", "cat"},
		{"sandbox", "exec", "abc", "--", "--", "-x"},
	} {
		x, ok := clifront.Parse(args)
		if !ok {
			t.Errorf("%q: the front leaves it to the CLI", args)
			continue
		}
		var out strings.Builder
		if code, handled := clifront.Run(x, empty, &out, io.Discard); !handled || code != 0 {
			t.Errorf("%q: front: exit %d, handled %v", args, code, handled)
			continue
		}
		front := <-got
		if _, stderr, code := runCLI(t, args...); code != 0 {
			t.Errorf("%q: CLI: exit %d: %s", args, code, stderr)
			continue
		}
		cli := <-got
		if !reflect.DeepEqual(front, cli) {
			t.Errorf("%q: the front sent %+v, the CLI %+v", args, front, cli)
		}
	}
}
