package clifront

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock/client/wire"
)

// fakeAppliance serves the exec route on a unix socket as the appliance
// does (HTTP/1.0 answers, a bound on the request headers' wait and on the
// body) and echoes the request's stdin as the command's output.
func fakeAppliance(t *testing.T, headerWait time.Duration, maxBody int64) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: headerWait, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req wire.ExecRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&req); err != nil {
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(wire.Error{Code: "invalid", Message: "request body: " + err.Error(), RequestID: "rq1"})
			return
		}
		enc := json.NewEncoder(w)
		enc.Encode(wire.ExecFrame{Stream: "stdout", Data: req.Stdin})
		enc.Encode(wire.ExecFrame{Exit: &wire.ExecResult{ExitCode: 0}})
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// slowReader gives its data only after a wait, as a person typing or a
// slow producer in a pipe does.
type slowReader struct {
	wait time.Duration
	r    io.Reader
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.wait > 0 {
		time.Sleep(s.wait)
		s.wait = 0
	}
	return s.r.Read(p)
}

// TestStdinSlowerThanTheHeaderWait: stdin that takes longer than the
// appliance waits for a request's headers still reaches the command (the
// request goes out once stdin is read, on a connection of its own).
func TestStdinSlowerThanTheHeaderWait(t *testing.T) {
	sock := fakeAppliance(t, 200*time.Millisecond, 16<<20)
	x := Exec{Sandbox: "abc", Socket: sock, Stdin: true, Req: wire.ExecRequest{Argv: []string{"cat"}}}
	var out, errb bytes.Buffer
	code, handled := Run(x, &slowReader{wait: 600 * time.Millisecond, r: strings.NewReader("typed slowly")}, &out, &errb)
	if !handled || code != 0 || out.String() != "typed slowly" {
		t.Fatalf("Run = %d, handled %v, stdout %q, stderr %q", code, handled, out.String(), errb.String())
	}
}

// TestStdinBound: stdin over MaxStdin is refused with the bound named (it
// was cut there without a word); at the bound it goes whole; and when the
// appliance refuses a request body before reading it, its answer is what
// the user sees, not a broken pipe.
func TestStdinBound(t *testing.T) {
	if _, err := ReadStdin(bytes.NewReader(make([]byte, MaxStdin+1))); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("stdin one byte over the bound: %v", err)
	}
	if b, err := ReadStdin(bytes.NewReader(make([]byte, MaxStdin))); err != nil || len(b) != MaxStdin {
		t.Errorf("stdin at the bound: %d bytes, %v", len(b), err)
	}
	sock := fakeAppliance(t, 10*time.Second, 16<<20)
	x := Exec{Sandbox: "abc", Socket: sock, Stdin: true, Req: wire.ExecRequest{Argv: []string{"cat"}}}
	var out, errb bytes.Buffer
	if code, _ := Run(x, bytes.NewReader(bytes.Repeat([]byte("x"), MaxStdin)), &out, &errb); code != 0 || out.Len() != MaxStdin {
		t.Fatalf("stdin of MaxStdin bytes within the appliance's 16 MiB body bound: exit %d, %d bytes back, stderr %q", code, out.Len(), errb.String())
	}
	small := fakeAppliance(t, 10*time.Second, 1<<10)
	x.Socket = small
	out.Reset()
	errb.Reset()
	code, _ := Run(x, bytes.NewReader(bytes.Repeat([]byte("y"), 8<<20)), &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "request body") || strings.Contains(errb.String(), "broken pipe") {
		t.Fatalf("a body the appliance refuses: exit %d, stderr %q", code, errb.String())
	}
}
