package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock/certs"
	"airlock/client"
	"airlock/e2e/world"
)

//go:embed testdata/hostile_app.py
var hostileApp []byte

const (
	previewHost = "preview.example.test"
	hostilePath = "/tmp/airlock-hostile-app.py"
	hostilePort = 5173
)

// TestBypassSuiteWithPreview: a preview is open on a sandbox's dev server —
// a hostile one, which writes forged requests on every connection the
// appliance opens to it — with a WebSocket held open through it, and
// (1) the app cannot use the preview's upstream connection to reach
// anything: what it writes reaches the one client that asked and nothing
// else, and the world's servers receive nothing; (2) the whole bypass
// suite, plus attempts on the preview listener itself, still passes from
// that sandbox: every attempt refused and logged.
func TestBypassSuiteWithPreview(t *testing.T) {
	requireAppliance(t)
	t.Parallel()
	w := startWorld(t)
	pport := freePort()
	// The listener on every host address, the gateway's included: only
	// the kernel path stands between the sandbox and it.
	a := startApplianceEdited(t, w, func(cfg string) string {
		return cfg + fmt.Sprintf("\n[preview]\nlisten = \"0.0.0.0:%d\"\nhost = %q\n", pport, previewHost)
	})
	peer := a.newSandbox(t, false)
	sb := a.newSandbox(t, false)
	mark := "pvhostile" + w.ID
	startApp(t, peer, fmt.Sprintf("python3 -c %s %d", shellQuote(peerApp), hostilePort))
	startApp(t, sb, fmt.Sprintf("python3 %s %d %s %s %s %d %s", hostilePath, hostilePort,
		w.Addr(world.RoleCanary), w.Addr(world.RoleEvil), mark, pport, peer.address))

	ctx := context.Background()
	p, err := a.c.Expose(ctx, sb.id, client.ExposeRequest{Port: hostilePort, TTL: "30m", Name: "hostile"})
	if err != nil {
		t.Fatalf("expose: %v\n%s", err, a.tail(20))
	}
	pc := newPreviewClient(t, a, pport)
	cookie := pc.exchange(t, p.Links["local"])
	ws := pc.rawWebSocket(t, p.URL, cookie)

	t.Run("the app cannot reach out through its preview", func(t *testing.T) {
		hostileCannotReachOut(t, w, a, sb, pc, p.URL, cookie, ws, mark)
	})

	env := EnvFor(w)
	env.Gateway, env.Peer = a.gateway, peer.address
	env.ProxyPort, env.ExplicitPort = a.ports.proxy, a.ports.explicit
	env.ControlPort, env.MetricsPort = a.ports.control, a.ports.metrics
	env.ControlSocket, env.Probe = a.socket, "python3 "+probePath
	attempts := append(append([]Attempt{}, Attempts...), previewAttempts(p.URL, pport)...)
	t.Run("bypass suite", func(t *testing.T) { runSuite(t, w, sb, env, "p", attempts) })

	t.Run("the preview stayed open", func(t *testing.T) {
		ws.echo(t, "still-open-"+mark)
		if status, body := pc.get(t, p.URL, cookie); status != http.StatusOK || body != "hostile app" {
			t.Errorf("after the suite: %d %q, want the app", status, body)
		}
		ps, err := a.c.Previews(ctx, sb.id)
		if err != nil || len(ps) != 1 || ps[0].ID != p.ID {
			t.Errorf("previews after the suite: %+v %v, want %s alone", ps, err, p.ID)
		}
	})
}

// previewAttempts are bypass attempts on the preview listener itself.
func previewAttempts(previewURL string, pport uint16) []Attempt {
	u, _ := url.Parse(previewURL)
	name, port := u.Hostname(), fmt.Sprint(pport)
	fill := func(s string) string {
		return strings.NewReplacer("[pport]", port, "[pname]", name).Replace(s)
	}
	ats := []Attempt{
		{Name: "preview-listener-on-gateway", Class: ClassGateway, Cmd: curl + "-k https://{{gw}}:[pport]/{{mark}}",
			Refused: "steered to the proxy, which refuses the appliance's own address", Log: []string{"{{gw}}:[pport]"}},
		{Name: "preview-listener-by-its-name-on-gateway", Class: ClassGateway,
			Cmd:     curl + "-k --resolve [pname]:[pport]:{{gw}} https://[pname]:[pport]/?m={{mark}}",
			Refused: "the preview's own name and port from inside: the proxy refuses it", Log: []string{"{{gw}}:[pport]"}},
		{Name: "preview-listener-on-sandbox-loopback", Class: ClassGateway, Cmd: curl + "-k https://127.0.0.1:[pport]/{{mark}}",
			Refused: "the sandbox's loopback is its own: nothing listens there", LocalOK: true},
	}
	for i := range ats {
		ats[i].Cmd = fill(ats[i].Cmd)
		for j := range ats[i].Log {
			ats[i].Log[j] = fill(ats[i].Log[j])
		}
	}
	return ats
}

// peerApp is another sandbox's app on the same port, on every address.
const peerApp = `import http.server as h, sys
class H(h.BaseHTTPRequestHandler):
    def do_GET(s):
        s.send_response(200); s.send_header("Content-Length", "8"); s.end_headers(); s.wfile.write(b"peer app")
h.HTTPServer(("0.0.0.0", int(sys.argv[1])), H).serve_forever()
`

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// startApp copies the hostile app into a sandbox and starts cmd there in
// the background, detached from the exec that starts it, until
// hostilePort answers.
func startApp(t *testing.T, sb *sandbox, cmd string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := sb.copyIn(ctx, hostilePath, hostileApp); err != nil {
		t.Fatalf("copy the app in: %v", err)
	}
	if r, err := sb.run(ctx, "setsid "+cmd+" </dev/null >/tmp/app.log 2>&1 &", nil); err != nil || r.code != 0 {
		t.Fatalf("start the app: %v %v", err, r.output())
	}
	waitFor(t, 30*time.Second, "the app in "+sb.id, func() bool {
		r, _ := sb.run(ctx, fmt.Sprintf("curl -s --noproxy '*' -m 2 http://127.0.0.1:%d/", hostilePort), nil)
		return strings.HasSuffix(r.stdout, " app")
	})
}

func hostileCannotReachOut(t *testing.T, w *world.World, a *appliance, sb *sandbox, pc *previewClient, base, cookie string, ws *rawWS, mark string) {
	wmark, from := w.Mark(), time.Now()
	status, body := pc.get(t, base+"peer", cookie)
	if status != http.StatusOK || !strings.HasPrefix(body, "peer=127.0.0.1:") || !strings.HasSuffix(body, fmt.Sprintf("local=127.0.0.1:%d", hostilePort)) {
		t.Errorf("/peer: %d %q, want the upstream on the sandbox's own loopback", status, body)
	}
	status, body = pc.get(t, base+"reach", cookie)
	if status != http.StatusOK || !strings.Contains(body, "listener-on-loopback no-connect(ConnectionRefusedError)") {
		t.Errorf("/reach: %d %q, want the app's report with the listener out of reach", status, body)
	}
	for _, m := range append(leakMarkers, "peer app") {
		if strings.Contains(body, m) {
			t.Errorf("/reach: the app reached the world (%q):\n%s", m, body)
		}
	}
	t.Logf("the app's own attempts, made while a preview request was in flight:\n%s", body)
	if status, body = pc.get(t, base+"smuggle", cookie); status != http.StatusOK || body != "ok" {
		t.Errorf("/smuggle: %d %q, want the one answer asked for", status, body)
	}
	for i := 0; i < 3; i++ {
		if status, body = pc.get(t, base, cookie); status != http.StatusOK || body != "hostile app" {
			t.Errorf("after /smuggle, request %d: %d %q, want a fresh answer (not the unasked one)", i, status, body)
		}
	}
	resp := pc.do(t, base+"redirect", cookie)
	if resp.StatusCode != http.StatusTemporaryRedirect || !strings.Contains(resp.Header.Get("Location"), mark) {
		t.Errorf("/redirect: %d %q, want the app's 307 handed to the client, not followed", resp.StatusCode, resp.Header.Get("Location"))
	}
	if status, body = pc.get(t, base+"switch", cookie); status != http.StatusBadGateway || strings.Contains(body, mark) {
		t.Errorf("/switch: %d %q, want 502 and none of the app's raw bytes", status, body)
	}
	if got := string(ws.forged); !strings.Contains(got, "GET http://") || !strings.Contains(got, mark) {
		t.Errorf("the WebSocket's client did not get the app's raw bytes: %q", got)
	}
	ws.echo(t, "to-the-client-"+mark)
	time.Sleep(eventGrace)
	if l := w.Since(wmark, world.Leaks); len(l) > 0 {
		t.Errorf("the world recorded %d leak(s):\n%s", len(l), records(l))
	}
	if r := w.Since(wmark, world.Containing(mark)); len(r) > 0 {
		t.Errorf("the world received the app's requests:\n%s", records(r))
	}
	evs, err := sb.events(context.Background(), from.Add(-time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := findRefusal(evs, sb.id, []string{w.Addr(world.RoleCanary).String() + ":80"}); !ok {
		t.Errorf("the app's connection to the canary was not refused and logged:\n%s", describe(evs))
	}
}

// previewClient reaches the preview listener on the host's loopback,
// trusting the appliance CA; it keeps no cookies and follows no redirect.
type previewClient struct {
	c     *http.Client
	roots *x509.CertPool
	addr  string
}

func newPreviewClient(t *testing.T, a *appliance, pport uint16) *previewClient {
	pem, err := os.ReadFile(filepath.Join(a.dir, "state", certs.CertFile))
	if err != nil {
		t.Fatal(err)
	}
	pc := &previewClient{roots: x509.NewCertPool(), addr: fmt.Sprintf("127.0.0.1:%d", pport)}
	pc.roots.AppendCertsFromPEM(pem)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pc.roots}, ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", pc.addr)
		}}
	t.Cleanup(tr.CloseIdleConnections)
	pc.c = &http.Client{Transport: tr, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return pc
}

func (pc *previewClient) do(t *testing.T, u, cookie string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	resp, err := pc.c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func (pc *previewClient) get(t *testing.T, u, cookie string) (int, string) {
	t.Helper()
	resp := pc.do(t, u, cookie)
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// exchange trades a link for the preview's cookie ("name=value").
func (pc *previewClient) exchange(t *testing.T, link string) string {
	t.Helper()
	resp := pc.do(t, link, "")
	for _, ck := range resp.Cookies() {
		if ck.Name == "airlock_preview" && resp.StatusCode == http.StatusSeeOther {
			return ck.Name + "=" + ck.Value
		}
	}
	t.Fatalf("link: %d %v, want 303 with the preview's cookie", resp.StatusCode, resp.Header)
	return ""
}

// rawWS is a WebSocket upgrade through the preview whose bytes are read
// and written as they come (the hostile app frames nothing).
type rawWS struct {
	c      net.Conn
	r      *bufio.Reader
	forged []byte // what the app wrote right after its 101
}

func (pc *previewClient) rawWebSocket(t *testing.T, base, cookie string) *rawWS {
	u, _ := url.Parse(base)
	c, err := tls.Dial("tcp", pc.addr, &tls.Config{ServerName: u.Hostname(), RootCAs: pc.roots, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: %s\r\nCookie: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", u.Host, cookie)
	ws := &rawWS{c: c, r: bufio.NewReader(c)}
	resp, err := http.ReadResponse(ws.r, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade through the preview: %v %v", resp, err)
	}
	// The app's forged requests end with the CONNECT's blank line.
	for !strings.HasSuffix(string(ws.forged), ":443\r\n\r\n") {
		b, err := ws.r.ReadByte()
		if err != nil {
			t.Fatalf("reading the app's bytes (%q so far): %v", ws.forged, err)
		}
		ws.forged = append(ws.forged, b)
	}
	_ = c.SetDeadline(time.Time{})
	return ws
}

// echo writes msg and reads it back from the app's raw echo.
func (ws *rawWS) echo(t *testing.T, msg string) {
	t.Helper()
	_ = ws.c.SetDeadline(time.Now().Add(20 * time.Second))
	defer ws.c.SetDeadline(time.Time{})
	if _, err := io.WriteString(ws.c, msg); err != nil {
		t.Fatalf("write on the WebSocket: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(ws.r, got); err != nil || string(got) != msg {
		t.Fatalf("echo on the WebSocket: %q %v, want %q", got, err, msg)
	}
}
