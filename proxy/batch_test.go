package proxy

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"airlock/proxy/internal/nettest"
)

// randomBody is the world's /random body (nettest.RandomBody).
var randomBody = nettest.RandomBody

// TestMITMBulkBodyIntactAndReused: large bodies through an inspected
// connection — read from the upstream in large pieces, written to the
// client in batches of records — arrive byte for byte, and the upstream
// connection is reused for the next request.
func TestMITMBulkBodyIntactAndReused(t *testing.T) {
	e := newEnv(t)
	c := e.transparentClient(e.worldDst(), false)
	want := sha256.Sum256(randomBody())
	for i := range 2 {
		resp, err := c.Get(e.url("docs.example.test", "/random"))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		n, err := io.Copy(h, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d, %d bytes, %v", i, resp.StatusCode, n, err)
		}
		if n != int64(len(randomBody())) || !bytes.Equal(h.Sum(nil), want[:]) {
			t.Fatalf("request %d: got %d bytes with another digest; want the %d bytes the origin sent", i, n, len(randomBody()))
		}
	}
	if d := e.dials.list(); len(d) != 1 {
		t.Fatalf("two bulk requests dialed the upstream %d times, want once (reused): %v", len(d), d)
	}
	// A request with a body takes the transport's path; its response
	// body arrives whole too.
	resp, err := c.Post(e.url("docs.example.test", "/random"), "text/plain", strings.NewReader("a request body"))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || n != int64(len(randomBody())) || !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatalf("POST: status %d, %d bytes, %v; want the %d bytes the origin sent", resp.StatusCode, n, err, len(randomBody()))
	}
}

// TestMITMLongBodyNotHeldBack: the first bytes of a long body of known
// length reach the client while the origin waits before sending the
// rest: the proxy never holds bytes back to fill a batch.
func TestMITMLongBodyNotHeldBack(t *testing.T) {
	e := newEnv(t)
	resp, err := e.transparentClient(e.worldDst(), false).Get(e.url("docs.example.test", "/trickle"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make(chan error, 1)
	go func() {
		b := make([]byte, 1000)
		_, err := io.ReadFull(resp.Body, b)
		if err == nil && !bytes.Equal(b, bytes.Repeat([]byte("t"), 1000)) {
			err = fmt.Errorf("first bytes %q", b[:20])
		}
		first <- err
	}()
	select {
	case err := <-first:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first 1000 bytes, sent alone, did not reach the client: the proxy held them back")
	}
	e.w.trickle <- struct{}{}
	rest, err := io.ReadAll(resp.Body)
	if err != nil || len(rest) != 99000 {
		t.Fatalf("rest of the body: %d bytes, %v; want 99000", len(rest), err)
	}
}
