package serve_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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

	"golang.org/x/net/websocket"

	"airlock/audit"
	"airlock/client"
	"airlock/internal/cdptest"
)

const previewHost = "preview.example.test"

// devServer is the sandbox's dev server: a page whose script renders and
// opens a WebSocket that echoes, and /port saying which port answered.
const devServer = `import base64, hashlib, http.server, socketserver, sys
PORT = int(sys.argv[1])
PAGE = b"""<!doctype html><title>dev server</title><h1 id=h>static</h1><p id=ws>ws pending</p>
<script>
document.getElementById('h').textContent = 'rendered by script';
const w = new WebSocket('wss://' + location.host + '/ws');
w.onopen = () => w.send('hello');
w.onmessage = e => { document.getElementById('ws').textContent = 'echo:' + e.data; };
w.onerror = () => { document.getElementById('ws').textContent = 'ws error'; };
</script>"""
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path == '/ws' and self.headers.get('Upgrade', '').lower() == 'websocket':
            return self.ws()
        body = ('port %d' % PORT).encode() if self.path == '/port' else PAGE
        self.send_response(200)
        self.send_header('Content-Type', 'text/html')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def ws(self):
        k = self.headers['Sec-WebSocket-Key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'
        self.send_response(101)
        self.send_header('Upgrade', 'websocket')
        self.send_header('Connection', 'Upgrade')
        self.send_header('Sec-WebSocket-Accept', base64.b64encode(hashlib.sha1(k.encode()).digest()).decode())
        self.end_headers()
        self.wfile.flush()
        r, w = self.rfile, self.wfile
        while True:
            h = r.read(2)
            if len(h) < 2: return
            op, n = h[0] & 15, h[1] & 127
            if n == 126: n = int.from_bytes(r.read(2), 'big')
            elif n == 127: n = int.from_bytes(r.read(8), 'big')
            m = r.read(4) if h[1] & 128 else b'\0\0\0\0'
            d = bytes(b ^ m[i % 4] for i, b in enumerate(r.read(n)))
            if op == 8: return
            if op in (1, 2) and len(d) < 126:
                w.write(bytes([0x80 | op, len(d)]) + d)
                w.flush()
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
S(('127.0.0.1', PORT), H).serve_forever()
`

func freePort(t *testing.T) (net.Listener, int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, ln.Addr().(*net.TCPAddr).Port
}

// TestPreviewInLab: a real appliance with a [preview] listener and a real
// Debian sandbox running a dev server. Headless Chromium opens the
// preview link: the page renders, its WebSocket works, the token is gone
// from the final URL. The app is reached inside the sandbox (a decoy on
// the host's loopback on the same port is never hit), a port nobody
// listens on answers 502 naming it, unexpose closes an open WebSocket
// within a second, and the preview ends with its sandbox.
func TestPreviewInLab(t *testing.T) {
	l := newLab(t, debianImage)
	pl, pport := freePort(t)
	pl.Close()
	l.extra = fmt.Sprintf("\n[preview]\nlisten = \"127.0.0.1:%d\"\nhost = %q\n", pport, previewHost)
	l.writeFiles()
	l.spec.agent = buildAgent(t, l.dir) // the dev server runs in the background
	l.startServe()
	sb := l.create(debianImage)
	decoy, port := freePort(t) // the host's 127.0.0.1:PORT: must never answer a preview
	defer decoy.Close()
	go http.Serve(decoy, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "decoy on the host") }))
	startDevServer(t, l, sb.ID, port)
	ctx := context.Background()

	p, err := l.c.Expose(ctx, sb.ID, client.ExposeRequest{Port: port, TTL: "10m", Name: "dev"})
	if err != nil {
		t.Fatalf("expose: %v\n%s", err, l.tail(20))
	}
	link := p.Links["local"]
	if link == "" || !strings.HasPrefix(p.URL, "https://"+p.ID+"."+previewHost+":") {
		t.Fatalf("preview %+v", p)
	}
	t.Run("browser", func(t *testing.T) { browserOpens(t, link, pport) })
	c := previewClient(t, l, pport)
	t.Run("only the exposed port, inside the sandbox", func(t *testing.T) {
		ck := exchange(t, c, mustLink(t, l, sb.ID, port))
		resp, body := fetch(t, c, ck.URL+"port", ck.Cookie)
		if resp.StatusCode != 200 || body != fmt.Sprintf("port %d", port) {
			t.Errorf("through the preview: %d %q, want the sandbox's app", resp.StatusCode, body)
		}
		if r := l.exec(sb.ID, fmt.Sprintf("curl -sk --max-time 3 https://127.0.0.1:%d/ ; echo rc=$?", pport)); !strings.Contains(r.stdout, "rc=7") && !strings.Contains(r.stdout, "rc=28") {
			t.Errorf("the sandbox reached the preview listener: %v", r)
		}
		// Through its gateway the sandbox meets the kernel path, which
		// sends every TCP flow to the proxy; the appliance's own address
		// is refused there, so the listener stays out of reach.
		if r := l.exec(sb.ID, fmt.Sprintf("curl -sk --noproxy '*' --max-time 5 -o /dev/null -w '%%{http_code}' https://%s:%d/ ; echo rc=$?", l.gw, pport)); strings.HasPrefix(r.stdout, "200") || strings.HasPrefix(r.stdout, "303") || strings.HasPrefix(r.stdout, "401") {
			t.Errorf("the sandbox reached the preview listener through its gateway: %v", r)
		}
	})
	t.Run("502 naming the port", func(t *testing.T) {
		ck := exchange(t, c, mustLink(t, l, sb.ID, port+1))
		resp, body := fetch(t, c, ck.URL, ck.Cookie)
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, fmt.Sprintf("port %d", port+1)) {
			t.Errorf("%d %q", resp.StatusCode, body)
		}
	})
	t.Run("unexpose closes a websocket", func(t *testing.T) { unexposeCloses(t, l, c, sb.ID, port, pport) })
	t.Run("ttl closes a websocket", func(t *testing.T) { expiryCloses(t, l, c, sb.ID, port, pport) })
	t.Run("events", func(t *testing.T) { previewEvents(t, l, sb.ID, p.ID) })
	t.Run("ends with the sandbox", func(t *testing.T) {
		if err := l.c.Delete(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the preview's end", func() bool {
			resp, _ := fetch(t, c, p.URL, "")
			return resp.StatusCode == http.StatusGone
		})
	})
}

func startDevServer(t *testing.T, l *lab, id string, port int) {
	if r := l.exec(id, "cat > /tmp/dev.py <<'EOF'\n"+devServer+"EOF\n"); r.code != 0 {
		t.Fatalf("write dev server: %v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := l.c.Exec(ctx, id, client.ExecRequest{Argv: []string{"python3", "/tmp/dev.py", fmt.Sprint(port)}, Background: true}, io.Discard, io.Discard); err != nil {
		t.Fatalf("start dev server: %v", err)
	}
	waitFor(t, 20*time.Second, "the dev server", func() bool {
		return l.exec(id, fmt.Sprintf("curl -s --noproxy '*' http://127.0.0.1:%d/port", port)).stdout == fmt.Sprintf("port %d", port)
	})
}

func mustLink(t *testing.T, l *lab, id string, port int) string {
	p, err := l.c.Expose(context.Background(), id, client.ExposeRequest{Port: port, TTL: "5m"})
	if err != nil {
		t.Fatal(err)
	}
	return p.Links["local"]
}

func browserOpens(t *testing.T, link string, pport int) {
	if _, err := os.Stat("/usr/bin/chromium"); err != nil {
		t.Skip("skipped: /usr/bin/chromium is not installed")
	}
	b := cdptest.Start(t, 800, 600, "--ignore-certificate-errors",
		"--host-resolver-rules=MAP *."+previewHost+" 127.0.0.1")
	b.Navigate(link)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ok := b.WaitFor(ctx, `document.getElementById('ws') && document.getElementById('ws').textContent === 'echo:hello'`)
	shot := filepath.Join(os.TempDir(), "airlock-preview-screenshot.png")
	b.Screenshot(shot)
	t.Logf("screenshot: %s", shot)
	if !ok {
		t.Fatalf("page did not render with a working websocket: h=%q ws=%q url=%q", b.Eval("document.body ? document.body.innerText : ''"),
			b.Eval("document.getElementById('ws') ? document.getElementById('ws').textContent : ''"), b.Eval("location.href"))
	}
	if h := b.Eval("document.getElementById('h').textContent"); h != "rendered by script" {
		t.Errorf("heading %q: the script did not run", h)
	}
	final := b.Eval("location.href")
	if strings.Contains(final, "token") || !strings.HasSuffix(final, fmt.Sprintf(":%d/", pport)) {
		t.Errorf("final URL %q still carries the token", final)
	}
	if b.Eval("document.cookie") != "" {
		t.Error("the preview cookie is readable by the page's script (want HttpOnly)")
	}
}

// previewClient trusts the appliance CA, resolves preview hosts to the
// listener and keeps no cookies or redirects.
func previewClient(t *testing.T, l *lab, pport int) *http.Client {
	pem, err := os.ReadFile(filepath.Join(l.dir, "state", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", pport))
		}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type opened struct{ URL, Cookie string }

func exchange(t *testing.T, c *http.Client, link string) opened {
	t.Helper()
	resp, _ := fetch(t, c, link, "")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("link: %d, want 303", resp.StatusCode)
	}
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		t.Fatal("no TLS")
	}
	u, _ := url.Parse(link)
	for _, ck := range resp.Cookies() {
		if ck.Name == "airlock_preview" {
			return opened{URL: "https://" + u.Host + "/", Cookie: ck.Name + "=" + ck.Value}
		}
	}
	t.Fatalf("no cookie: %v", resp.Header)
	return opened{}
}

func fetch(t *testing.T, c *http.Client, u, cookie string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func unexposeCloses(t *testing.T, l *lab, c *http.Client, id string, port, pport int) {
	ck := exchange(t, c, mustLink(t, l, id, port))
	ws := openWebSocket(t, c, ck, pport)
	defer ws.Close()
	u, _ := url.Parse(ck.URL)
	pid := strings.SplitN(u.Hostname(), ".", 2)[0]
	start := time.Now()
	if err := l.c.Unexpose(context.Background(), id, pid); err != nil {
		t.Fatal(err)
	}
	closedWithin(t, ws, start, "unexpose")
	resp, body := fetch(t, c, ck.URL, ck.Cookie)
	if resp.StatusCode != http.StatusGone {
		t.Errorf("after unexpose: %d %q, want 410", resp.StatusCode, body)
	}
}

// expiryCloses: a preview with a short TTL closes its open WebSocket
// within a second of its expiry, and is then gone.
func expiryCloses(t *testing.T, l *lab, c *http.Client, id string, port, pport int) {
	p, err := l.c.Expose(context.Background(), id, client.ExposeRequest{Port: port, TTL: "5s"})
	if err != nil {
		t.Fatal(err)
	}
	ck := exchange(t, c, p.Links["local"])
	ws := openWebSocket(t, c, ck, pport)
	defer ws.Close()
	closedWithin(t, ws, p.Expires, "the ttl")
	resp, body := fetch(t, c, ck.URL, ck.Cookie)
	if resp.StatusCode != http.StatusGone || !strings.Contains(body, "ttl") {
		t.Errorf("after the ttl: %d %q, want 410 saying so", resp.StatusCode, body)
	}
}

// openWebSocket opens the dev server's echo WebSocket through the preview
// with its cookie and checks one echo.
func openWebSocket(t *testing.T, c *http.Client, ck opened, pport int) *websocket.Conn {
	u, _ := url.Parse(ck.URL)
	cfg, _ := websocket.NewConfig("wss://"+u.Host+"/ws", ck.URL)
	cfg.Header.Set("Cookie", ck.Cookie)
	tc, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", pport), &tls.Config{ServerName: u.Hostname(),
		RootCAs: c.Transport.(*http.Transport).TLSClientConfig.RootCAs, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := websocket.NewClient(cfg, tc)
	if err != nil {
		t.Fatalf("websocket through the preview: %v", err)
	}
	var got string
	_ = ws.SetDeadline(time.Now().Add(5 * time.Second))
	if err := websocket.Message.Send(ws, "ping"); err != nil || websocket.Message.Receive(ws, &got) != nil || got != "ping" {
		t.Fatalf("echo %q %v", got, err)
	}
	return ws
}

// closedWithin checks that ws is closed by the appliance within a second
// of end (and not before it).
func closedWithin(t *testing.T, ws *websocket.Conn, end time.Time, what string) {
	_ = ws.SetReadDeadline(end.Add(3 * time.Second))
	var got string
	err := websocket.Message.Receive(ws, &got)
	closed := time.Now()
	if ne, ok := err.(net.Error); err == nil || ok && ne.Timeout() || closed.Sub(end) > time.Second {
		t.Fatalf("websocket still open %s after %s: %v", closed.Sub(end), what, err)
	}
	if closed.Before(end) {
		t.Fatalf("websocket closed %s before %s", end.Sub(closed), what)
	}
	t.Logf("websocket closed %s after %s", closed.Sub(end).Round(time.Millisecond), what)
}

func previewEvents(t *testing.T, l *lab, id, pv string) {
	evs := l.events(id)
	for _, stage := range []string{"created", "opened", "revoked"} {
		if _, ok := findEvent(evs, func(e audit.Event) bool { return e.Preview != nil && e.Preview.Stage == stage }); !ok {
			t.Errorf("no preview %s event", stage)
		}
	}
	ws, ok := findEvent(evs, func(e audit.Event) bool { return e.Ingress != nil && e.ID == pv && e.Ingress.Status == 101 })
	if !ok || ws.Ingress.Upgrade != "websocket" || ws.Ingress.Principal != "local" || ws.Ingress.Client == "" {
		t.Errorf("no ingress event of the browser's websocket: %+v", ws.Ingress)
	}
	if _, ok := findEvent(evs, func(e audit.Event) bool {
		return e.Ingress != nil && e.Ingress.Status == 502 && e.Verdict == "allow"
	}); !ok {
		t.Error("no ingress event of the 502")
	}
}
