package serve

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/client"
)

// fakeAgent adds the agent's API to the fake backend: one file store and
// a terminal that echoes what is typed, upper-cased, and reports resizes.
type fakeAgent struct {
	*fakeBackend
	mu    sync.Mutex
	files map[string][]byte
}

func (f *fakeAgent) Processes(_ context.Context, id string) ([]client.Process, error) {
	if _, err := f.lookup(id); err != nil {
		return nil, err
	}
	return []client.Process{{ID: "e1", Pid: 7, Argv: []string{"sleep", "9"}, Running: true}}, nil
}
func (f *fakeAgent) Kill(_ context.Context, id, execID string) error {
	if execID != "e1" {
		return client.Errorf(client.CodeNotFound, "no command %q", execID)
	}
	return nil
}
func (f *fakeAgent) Signal(_ context.Context, id, execID, sig string) error {
	if sig != "HUP" {
		return client.Errorf(client.CodeInvalid, "unknown signal %q", sig)
	}
	return nil
}
func (f *fakeAgent) Attach(_ context.Context, id, execID string, stdout, stderr io.Writer) (client.ExecResult, error) {
	io.WriteString(stdout, "kept output\n")
	return client.ExecResult{ID: execID, ExitCode: 3}, nil
}
func (f *fakeAgent) ReadFile(_ context.Context, id, path string, w http.ResponseWriter) error {
	f.mu.Lock()
	b, ok := f.files[path]
	f.mu.Unlock()
	if !ok {
		return client.Errorf(client.CodeNotFound, "%s: no such file", path)
	}
	_, err := w.Write(b)
	return err
}
func (f *fakeAgent) WriteFile(_ context.Context, id, path string, mode uint32, size int64, r io.Reader) (client.FileInfo, error) {
	b, err := io.ReadAll(r)
	if err != nil || int64(len(b)) != size {
		return client.FileInfo{}, fmt.Errorf("got %d of %d bytes: %v", len(b), size, err)
	}
	f.mu.Lock()
	f.files[path] = b
	f.mu.Unlock()
	return client.FileInfo{Name: path, Size: size, Mode: mode, Type: "file"}, nil
}
func (f *fakeAgent) ListDir(context.Context, string, string) ([]client.FileInfo, error) {
	return []client.FileInfo{{Name: "a", Type: "file"}}, nil
}
func (f *fakeAgent) Stat(_ context.Context, _, path string) (client.FileInfo, error) {
	return client.FileInfo{Name: path, Type: "dir"}, nil
}
func (f *fakeAgent) Remove(context.Context, string, string, bool) error { return nil }
func (f *fakeAgent) Mkdir(context.Context, string, string, bool, uint32) error {
	return nil
}
func (f *fakeAgent) ExecTTY(ctx context.Context, id string, req client.ExecRequest, stdin io.Reader, resize <-chan client.Resize, stdout io.Writer) (client.ExecResult, error) {
	fmt.Fprintf(stdout, "size %dx%d\r\n", req.Rows, req.Cols)
	rs := <-resize
	fmt.Fprintf(stdout, "resized %dx%d\r\n", rs.Rows, rs.Cols)
	b := make([]byte, 64)
	n, _ := stdin.Read(b)
	stdout.Write(bytes.ToUpper(b[:n]))
	return client.ExecResult{ExitCode: 5}, nil
}

func TestAgentEndpoints(t *testing.T) {
	fb := newFake()
	fb.sandboxes["s1"] = client.Sandbox{ID: "s1", State: "running"}
	c, _ := startAPI(t, &fakeAgent{fakeBackend: fb, files: map[string][]byte{}}, "")
	ctx := context.Background()
	ps, err := c.Processes(ctx, "s1")
	if err != nil || len(ps) != 1 || ps[0].ID != "e1" {
		t.Fatalf("processes: %+v %v", ps, err)
	}
	if err := c.Kill(ctx, "s1", "nope"); !client.IsCode(err, client.CodeNotFound) {
		t.Fatalf("kill unknown: %v", err)
	}
	if err := c.Signal(ctx, "s1", "e1", "NOPE"); !client.IsCode(err, client.CodeInvalid) {
		t.Fatalf("bad signal: %v", err)
	}
	var out bytes.Buffer
	if res, err := c.Attach(ctx, "s1", "e1", &out, nil); err != nil || res.ExitCode != 3 || out.String() != "kept output\n" {
		t.Fatalf("attach: %+v %v %q", res, err, out.String())
	}
	data := []byte("bytes \x00\xff\n")
	if fi, err := c.WriteFile(ctx, "s1", "/w/f", 0o600, int64(len(data)), bytes.NewReader(data)); err != nil || fi.Mode != 0o600 {
		t.Fatalf("write: %+v %v", fi, err)
	}
	out.Reset()
	if n, err := c.ReadFile(ctx, "s1", "/w/f", &out); err != nil || n != int64(len(data)) || !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("read: %v %q", err, out.String())
	}
	if _, err := c.ReadFile(ctx, "s1", "/nope", &out); !client.IsCode(err, client.CodeNotFound) {
		t.Fatalf("read missing: %v", err)
	}
	if err := c.Mkdir(ctx, "s1", "/w/d", true); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, "s1", "/w/d", true); err != nil {
		t.Fatal(err)
	}
}

// A backend without the agent's API answers its routes "unsupported".
func TestAgentEndpointsUnsupportedWithoutAgent(t *testing.T) {
	c, _ := startAPI(t, newFake(), "")
	if _, err := c.Processes(context.Background(), "s1"); !client.IsCode(err, client.CodeUnsupported) {
		t.Fatalf("processes without an agent backend: %v", err)
	}
}

// A terminal exec upgrades the connection: typed bytes go up, resizes go
// up, output and the result come down.
func TestExecTTYUpgrade(t *testing.T) {
	fb := newFake()
	fb.sandboxes["s1"] = client.Sandbox{ID: "s1", State: "running"}
	c, _ := startAPI(t, &fakeAgent{fakeBackend: fb, files: map[string][]byte{}}, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inR, inW := io.Pipe()
	resize := make(chan client.Resize, 1)
	var out syncBuffer
	done := make(chan error, 1)
	var res client.ExecResult
	go func() {
		var err error
		res, err = c.ExecTTY(ctx, "s1", client.ExecRequest{Argv: []string{"sh"}, Rows: 40, Cols: 120}, inR, &out, resize)
		done <- err
	}()
	resize <- client.Resize{Rows: 50, Cols: 100}
	for !strings.Contains(out.String(), "resized") {
		time.Sleep(5 * time.Millisecond)
	}
	io.WriteString(inW, "typed")
	if err := <-done; err != nil || res.ExitCode != 5 {
		t.Fatalf("tty: %+v %v", res, err)
	}
	if got := out.String(); got != "size 40x120\r\nresized 50x100\r\nTYPED" {
		t.Fatalf("output %q", got)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
