package proxy

import (
	"crypto/tls"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"airlock/audit"
	"airlock/policies"
)

// swappable is a sandbox policy a test replaces, as a reload does.
type swappable struct {
	p atomic.Pointer[policies.Policy]
}

func (s *swappable) Decide(r policies.Request) policies.Verdict { return s.p.Load().Decide(r) }
func (s *swappable) Reach(a netip.Addr, v policies.Verdict) policies.AddrDecision {
	return policies.Bind(s.p.Load(), worldOperator).Reach(a, v)
}

// TestRedecideClosesSplicedTunnelsAfterReload: a spliced TLS tunnel that
// the reloaded policy denies is closed with a close record naming the new
// rule and the reason "policy reload"; another sandbox's tunnel that is
// still allowed keeps working.
func TestRedecideClosesSplicedTunnelsAfterReload(t *testing.T) {
	sb1 := &swappable{}
	var e *env
	e = newEnv(t, func(c *Config) {
		c.Identify = IdentifierFunc(func(a netip.Addr) (Sandbox, bool) {
			switch a.String() {
			case "127.0.0.1":
				return Sandbox{ID: "sb1", Policy: sb1}, true
			case "127.0.0.2":
				return Sandbox{ID: "sb2", Policy: e.policy}, true
			}
			return Sandbox{}, false
		})
	})
	sb1.p.Store(e.policy.Policy)
	src := e.w.policy(testPolicy)
	src = strings.Replace(src, "[deny]\n", "[deny]\nhosts = [\"splice.example.test\"]\n", 1)
	denying, err := policies.Parse("reloaded.toml", []byte(src))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}

	open := func(from string) *tls.Conn {
		c := e.dialTransparentFrom(e.worldDst(), from)
		tc := tls.Client(c, &tls.Config{ServerName: "splice.example.test", RootCAs: e.w.roots})
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			t.Fatalf("spliced handshake from %s: %v", from, err)
		}
		get(t, tc, e.w.tlsPort)
		return tc
	}
	doomed, kept := open("127.0.0.1"), open("127.0.0.2")

	if n := e.p.Redecide(); n != 0 {
		t.Fatalf("Redecide closed %d tunnels before any policy change", n)
	}
	sb1.p.Store(denying)
	if n := e.p.Redecide(); n != 1 {
		t.Fatalf("Redecide closed %d tunnels, want 1\n%s", n, e.ev.dump())
	}

	ev := e.ev.waitFor(t, "close record of the reloaded tunnel", func(ev audit.Event) bool {
		return ev.Kind == audit.KindFlow && ev.Sandbox == "sb1" && ev.Flow.Stage == "close"
	})
	if ev.Flow.CloseReason != "policy reload" || ev.Verdict != "deny" || !strings.HasPrefix(ev.Rule, "deny.hosts[0]") {
		t.Errorf("close record: reason %q verdict %q rule %q, want policy reload / deny / deny.hosts[0]", ev.Flow.CloseReason, ev.Verdict, ev.Rule)
	}
	if ev.Flow.Handling != "splice" || ev.Flow.BytesDown == 0 {
		t.Errorf("close record flow %+v", ev.Flow)
	}
	doomed.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(doomed, "GET /s HTTP/1.1\r\nHost: splice.example.test:%d\r\n\r\n", e.w.tlsPort); err == nil {
		if _, err := doomed.Read(make([]byte, 1)); err == nil {
			t.Error("the denied tunnel still carries bytes after Redecide")
		}
	}

	get(t, kept, e.w.tlsPort) // still allowed: still open
	for _, ev := range e.ev.all() {
		if ev.Sandbox == "sb2" && ev.Flow != nil && ev.Flow.Stage == "close" {
			t.Errorf("the still-allowed tunnel was closed: %+v", ev.Flow)
		}
	}
}

func get(t *testing.T, tc *tls.Conn, port uint16) {
	t.Helper()
	resp := rawExchange(t, tc, fmt.Sprintf("GET /s HTTP/1.1\r\nHost: splice.example.test:%d\r\n\r\n", port))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}
