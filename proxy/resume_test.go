package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"testing"

	"airlock/audit"
)

// anyNameCache offers the one session it holds for every server name, as
// a hostile client may.
type anyNameCache struct{ s *tls.ClientSessionState }

func (c *anyNameCache) Get(string) (*tls.ClientSessionState, bool) { return c.s, c.s != nil }
func (c *anyNameCache) Put(_ string, s *tls.ClientSessionState) {
	if s != nil {
		c.s = s
	}
}

// The client-facing TLS config is shared, so a session ticket one inspected
// connection issued resumes the next one (no full handshake); a resumed
// session is still decided on its server name.
func TestMITMSessionResumption(t *testing.T) {
	e := newEnv(t)
	cache := &anyNameCache{}
	get := func(name string) (int, bool) {
		t.Helper()
		tc := tls.Client(e.dialTransparent(e.h1Dst()), &tls.Config{
			ServerName: name, RootCAs: e.clientRoots(), ClientSessionCache: cache,
			NextProtos: []string{"http/1.1"},
		})
		defer tc.Close()
		fmt.Fprintf(tc, "GET /b HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n", name, e.w.h1Port)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, tc.ConnectionState().DidResume
	}
	if status, resumed := get("docs.example.test"); status != 200 || resumed {
		t.Fatalf("first connection: status %d, resumed %v; want 200, a full handshake", status, resumed)
	}
	if status, resumed := get("docs.example.test"); status != 200 || !resumed {
		t.Fatalf("second connection: status %d, resumed %v; want 200, resumed", status, resumed)
	}
	// The same ticket offered for a name no rule allows: denied all the same.
	if status, _ := get("evil.example.test"); status != http.StatusForbidden {
		t.Fatalf("resumed session for a denied name: status %d, want 403", status)
	}
	e.ev.waitFor(t, "deny of evil.example.test", func(ev audit.Event) bool {
		return ev.Flow != nil && ev.Flow.SNI == "evil.example.test" && ev.Verdict == "deny"
	})
}
