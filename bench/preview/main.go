// Command preview benchmarks the preview listener side by side, in one
// run: keep-alive requests/s at 1 and 32 connections and p50 latency
// through the listener (HTTPS, bearer token, upstream opened in the app's
// network namespace) vs a client connecting to the app inside that
// namespace directly (plain HTTP on its loopback), then RSS with 1,000
// idle WebSockets held open through the listener. Root: it makes a
// network namespace (unshare) for the app and removes it at exit.
//
//	go run ./bench/preview [-d 3s] [-ws 1000]
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/websocket"

	"airlock/preview"
)

const host = "preview.example.test"

func main() {
	if port := os.Getenv("PREVIEW_BENCH_APP"); port != "" {
		serveApp(port)
		return
	}
	dur := flag.Duration("d", 3*time.Second, "duration of each run")
	nws := flag.Int("ws", 1000, "idle websockets to hold")
	prof := flag.String("cpuprofile", "", "write a CPU profile of the whole run")
	flag.Parse()
	if *prof != "" {
		f, err := os.Create(*prof)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	if err := run(*dur, *nws); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench/preview:", err)
		os.Exit(1)
	}
}

// serveApp is the app inside the namespace: a small body and a WebSocket
// that stays open.
func serveApp(port string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello from the sandbox\n") })
	mux.Handle("/ws", websocket.Handler(func(c *websocket.Conn) { _, _ = io.Copy(io.Discard, c) }))
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	_ = http.Serve(ln, mux)
}

func run(dur time.Duration, nws int) error {
	const port = 8080
	self, _ := os.Executable()
	app := exec.Command("unshare", "--net", "--", "sh", "-c", `ip link set lo up && exec "$0"`, self)
	app.Env = append(os.Environ(), "PREVIEW_BENCH_APP="+strconv.Itoa(port))
	app.Stderr = os.Stderr
	if err := app.Start(); err != nil {
		return err
	}
	defer func() { _ = app.Process.Signal(syscall.SIGKILL); _ = app.Wait() }()
	pid := app.Process.Pid
	var dials atomic.Int64
	dial := func(ctx context.Context, _ string, p uint16) (net.Conn, error) {
		dials.Add(1)
		return preview.DialNetns(ctx, pid, p)
	}
	direct := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx, "", port) },
		MaxIdleConnsPerHost: 64}
	if err := waitApp(direct); err != nil {
		return err
	}
	m, url, ln, err := startListener(dial)
	if err != nil {
		return err
	}
	defer ln.Close()
	p, _, err := m.Create(preview.CreateRequest{Sandbox: "bench", Port: port, TTL: time.Hour, By: "bench"})
	if err != nil {
		return err
	}
	via := viaListener(url)
	floorAddr, err := startFloor(dial, port)
	if err != nil {
		return err
	}
	fmt.Printf("preview bench: %s per run, GOMAXPROCS=%d\n", dur, runtime.GOMAXPROCS(0))
	fmt.Printf("%-28s %6s %10s %10s\n", "path", "conns", "req/s", "p50")
	res := map[string]result{}
	for _, conns := range []int{1, 32} {
		for _, path := range []struct {
			name string
			tr   *http.Transport
			u    string
		}{{"direct (in the netns)", direct, "http://app/"}, {"floor: bare TLS proxy", viaListener(floorAddr), "https://floor/"},
			{"through the preview", via, p.URL}} {
			r := load(path.tr, path.u, conns, dur)
			res[fmt.Sprintf("%s/%d", path.name, conns)] = r
			fmt.Printf("%-28s %6d %10.0f %10s\n", path.name, conns, r.rps, r.p50)
		}
	}
	for _, c := range []int{1, 32} {
		d, v := res[fmt.Sprintf("direct (in the netns)/%d", c)], res[fmt.Sprintf("through the preview/%d", c)]
		f := res[fmt.Sprintf("floor: bare TLS proxy/%d", c)]
		fmt.Printf("at %d conns: preview %.2fx the direct rate (target >= 0.7 at 32), added p50 %s (target <= 300µs); floor %.2fx direct, preview %.2fx the floor\n",
			c, v.rps/d.rps, v.p50-d.p50, f.rps/d.rps, v.rps/f.rps)
	}
	fmt.Printf("upstream connections opened in the netns: %d\n", dials.Load())
	return idle(url, p.URL, nws)
}

func waitApp(tr *http.Transport) error {
	c := &http.Client{Transport: tr, Timeout: time.Second}
	for i := 0; i < 100; i++ {
		if resp, err := c.Get("http://app/"); err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(30 * time.Millisecond)
	}
	return fmt.Errorf("the app in the netns did not start")
}

// startListener runs a Manager behind TLS on loopback (admin bearer).
func startListener(dial preview.Dialer) (*preview.Manager, string, net.Listener, error) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	m, err := preview.New(preview.Config{Host: host, Port: ln.Addr().(*net.TCPAddr).Port, Key: key, Dial: dial,
		Rate: 1e9, Burst: 1 << 30,
		Authenticate: func(tok string) (preview.Principal, bool) {
			return preview.Principal{Name: "bench", Admin: true}, tok == "bench"
		}})
	if err != nil {
		return nil, "", nil, err
	}
	cert, err := selfSigned()
	if err != nil {
		return nil, "", nil, err
	}
	srv := m.Server(&tls.Config{Certificates: []tls.Certificate{cert}}, preview.Limits{MaxConns: 1 << 16})
	go func() { _ = srv.ServeTLS(preview.Listen(ln, preview.Limits{MaxConns: 1 << 16}), "", "") }()
	go m.Run(context.Background(), nil)
	return m, ln.Addr().String(), ln, nil
}

// startFloor is the least a TLS-terminating proxy to the same netns
// port does (httputil.ReverseProxy, no auth, no events): what the machine
// leaves for the target.
func startFloor(dial preview.Dialer, port uint16) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	cert, err := selfSigned()
	if err != nil {
		return "", err
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx, "", port) }}
	rp := &httputil.ReverseProxy{Transport: tr, Rewrite: func(pr *httputil.ProxyRequest) { pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "app" }}
	srv := &http.Server{Handler: rp, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	return ln.Addr().String(), nil
}

func selfSigned() (tls.Certificate, error) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "*." + host},
		DNSNames: []string{"*." + host}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}, nil
}

func viaListener(addr string) *http.Transport {
	return &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, MaxIdleConnsPerHost: 64,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}}
}

type result struct {
	rps float64
	p50 time.Duration
}

// load runs conns keep-alive clients for d and returns rate and p50.
func load(tr *http.Transport, u string, conns int, d time.Duration) result {
	c := &http.Client{Transport: tr}
	var mu sync.Mutex
	var lat []time.Duration
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(end) {
				req, _ := http.NewRequest("GET", u, nil)
				req.Header.Set("Authorization", "Bearer bench")
				t := time.Now()
				resp, err := c.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					mine = append(mine, time.Since(t))
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	tr.CloseIdleConnections()
	if len(lat) == 0 {
		return result{}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return result{rps: float64(len(lat)) / d.Seconds(), p50: lat[len(lat)/2]}
}

// idle holds n WebSockets open through the listener and reports RSS.
func idle(addr, purl string, n int) error {
	runtime.GC()
	before := rss()
	hostport := strings.TrimSuffix(strings.TrimPrefix(purl, "https://"), "/")
	var conns []*websocket.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		cfg, _ := websocket.NewConfig("wss://"+hostport+"/ws", purl)
		cfg.Header.Set("Authorization", "Bearer bench")
		tc, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			return fmt.Errorf("websocket %d: %w", i, err)
		}
		ws, err := websocket.NewClient(cfg, tc)
		if err != nil {
			return fmt.Errorf("websocket %d: %w", i, err)
		}
		conns = append(conns, ws)
	}
	time.Sleep(time.Second)
	runtime.GC()
	after := rss()
	fmt.Printf("%d idle websockets through the preview: RSS %d MiB -> %d MiB (+%d KiB, %.1f KiB each; client and listener in one process, the app in its own)\n",
		n, before>>20, after>>20, (after-before)>>10, float64(after-before)/1024/float64(n))
	return nil
}

func rss() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
