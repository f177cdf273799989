package proxy

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"airlock/audit"
)

// slowAttributor answers each lookup after delay with the client's port
// as the pid, recording what it was asked.
type slowAttributor struct {
	delay time.Duration
	mu    sync.Mutex
	asked map[uint16]string // local port -> remote
}

func (a *slowAttributor) Attribute(sb, proto string, local, remote netip.AddrPort) *audit.Owner {
	a.mu.Lock()
	a.asked[local.Port()] = proto + " " + remote.String()
	a.mu.Unlock()
	o := audit.NewOwner()
	time.AfterFunc(a.delay, func() {
		o.Set(audit.Attribution{ExecID: "exec-" + sb, Pid: int(local.Port()), Comm: "curl", Status: audit.AttrSocket})
	})
	return o
}

func (a *slowAttributor) remote(port uint16) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.asked[port]
}

// TestFlowAttribution: through the real proxy, a flow's decision, request
// and close records carry the exec id and pid of the process behind the
// connection, in their order, while the request itself does not wait for
// the lookup (300 ms here); the lookup is asked about the client's socket
// and the original destination it dialed. A refused connection's records
// carry it too.
func TestFlowAttribution(t *testing.T) {
	at := &slowAttributor{delay: 300 * time.Millisecond, asked: map[uint16]string{}}
	e := newEnv(t, func(c *Config) { c.Attributor = at })
	c := e.dialTransparent(e.worldDst())
	port := netip.MustParseAddrPort(c.LocalAddr().String()).Port()
	start := time.Now()
	resp := rawExchange(t, tlsClient(t, e, c, "docs.example.test"), fmt.Sprintf("GET /guide HTTP/1.1\r\nHost: docs.example.test:%d\r\nConnection: close\r\n\r\n", e.w.tlsPort))
	resp.Body.Close()
	if took := time.Since(start); resp.StatusCode != 200 || took > 250*time.Millisecond {
		t.Fatalf("status %d after %s: the request waited for the attribution", resp.StatusCode, took)
	}
	if got, want := at.remote(port), "tcp "+e.worldDst().String(); got != want {
		t.Errorf("lookup of port %d asked %q, want %q", port, got, want)
	}
	cl := e.ev.waitFor(t, "the close record", func(ev audit.Event) bool {
		return ev.Kind == audit.KindFlow && ev.Flow.Stage == "close" && ev.Pid == int(port)
	})
	var kinds []string
	for _, ev := range e.ev.all() {
		if ev.ID == cl.ID || ev.HTTP != nil && ev.HTTP.FlowID == cl.ID {
			if ev.ExecID != "exec-sb1" || ev.Pid != int(port) || ev.Comm != "curl" || ev.Attribution != audit.AttrSocket {
				t.Errorf("%s record without the attribution: %q %d %q %q", ev.Kind, ev.ExecID, ev.Pid, ev.Comm, ev.Attribution)
			}
			kinds = append(kinds, string(ev.Kind)+"/"+stageOf(ev))
		}
	}
	if want := "flow/decision http/ flow/close"; joinSp(kinds) != want {
		t.Errorf("records in order %q, want %q", joinSp(kinds), want)
	}

	d := e.dialTransparent(e.worldDst())
	dport := netip.MustParseAddrPort(d.LocalAddr().String()).Port()
	resp = rawExchange(t, tlsClient(t, e, d, "docs.example.test"), fmt.Sprintf("DELETE /guide HTTP/1.1\r\nHost: docs.example.test:%d\r\nConnection: close\r\n\r\n", e.w.tlsPort))
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("a denied method: status %d", resp.StatusCode)
	}
	den := e.ev.waitFor(t, "the denial", func(ev audit.Event) bool {
		return ev.Kind == audit.KindHTTP && ev.Verdict == "deny" && ev.Pid == int(dport)
	})
	if den.ExecID != "exec-sb1" || den.HTTP.Method != "DELETE" {
		t.Errorf("denial: exec %q method %q", den.ExecID, den.HTTP.Method)
	}
}

func tlsClientErr(e *env, c net.Conn, sni string) (*tls.Conn, error) {
	tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: e.clientRoots(), NextProtos: []string{"http/1.1"}})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	return tc, tc.Handshake()
}

func tlsClient(t *testing.T, e *env, c net.Conn, sni string) *tls.Conn {
	t.Helper()
	tc, err := tlsClientErr(e, c, sni)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

func stageOf(ev audit.Event) string {
	if ev.Flow != nil {
		return ev.Flow.Stage
	}
	return ""
}

func joinSp(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += " "
		}
		out += s
	}
	return out
}
