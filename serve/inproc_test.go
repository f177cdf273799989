package serve

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestInprocTransportStreamsAndEnds: the in-process transport passes the
// caller (token, address), streams what the handler writes as it writes
// it, ends the handler's request when the body is closed early, and
// turns a handler's panic into a failed read, not a crash.
func TestInprocTransportStreamsAndEnds(t *testing.T) {
	ended := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic("boom")
		case "/who":
			w.Header().Set("X-Who", r.Header.Get("Authorization")+" "+r.RemoteAddr)
			w.WriteHeader(http.StatusTeapot)
			return
		}
		defer close(ended)
		_, _ = io.WriteString(w, "chunk\nchunk\n")
		<-r.Context().Done() // a command that runs until the caller goes

	})
	hc := &http.Client{Transport: inprocTransport{h: h, auth: "Bearer tok", remote: "198.18.0.9:4000"}}
	resp, err := hc.Get("http://airlock/who")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot || resp.Header.Get("X-Who") != "Bearer tok 198.18.0.9:4000" {
		t.Errorf("status %d, X-Who %q", resp.StatusCode, resp.Header.Get("X-Who"))
	}

	resp, err = hc.Get("http://airlock/stream")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 12)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "chunk\nchunk\n" {
		t.Fatalf("read %q, %v", buf, err)
	}
	resp.Body.Close()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler runs on after the client closed the body")
	}

	resp, err = hc.Get("http://airlock/panic")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError {
			t.Errorf("a panicking handler answered %d", resp.StatusCode)
		}
	}
	if err == nil || !strings.Contains(err.Error(), "handler failed") {
		t.Errorf("a panicking handler: %v, want a failed read", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://airlock/who", nil)
	if _, err := hc.Do(req); err == nil {
		t.Error("a cancelled request got an answer")
	}
}
