// Command proxy is the helper of bench/proxy.sh: it makes the test
// certificates, runs an HTTPS origin, runs Airlock's proxy with a bench
// policy, runs the floor proxies (the least a proxy can do: see floor.go),
// and generates load through an HTTP proxy (CONNECT) or directly, printing
// one JSON line of results. Loopback only.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"airlock/audit"
	"airlock/certs"
	"airlock/policies"
	"airlock/proxy"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: proxy mkcerts|origin|airlock|floor|load|idle|snis [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "mkcerts":
		err = mkcerts(os.Args[2:])
	case "origin":
		err = origin(os.Args[2:])
	case "airlock":
		err = airlock(os.Args[2:])
	case "load":
		err = load(os.Args[2:])
	case "idle":
		err = idle(os.Args[2:])
	case "snis":
		err = snis(os.Args[2:])
	case "floor":
		err = floor(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/proxy:", err)
		os.Exit(1)
	}
}

var benchNames = []string{"origin.example.test", "splice.example.test", "*.sni.example.test"}

// mkcerts writes dir/origin-ca.pem, dir/origin.pem (leaf + key) and
// dir/squid-ca.pem (CA certificate + key, for squid's ssl-bump).
func mkcerts(args []string) error {
	fs := flag.NewFlagSet("mkcerts", flag.ExitOnError)
	dir := fs.String("dir", ".", "output directory")
	fs.Parse(args)
	caCert, caKey, caPEM, err := newCA("bench origin CA")
	if err != nil {
		return err
	}
	leafPEM, err := newLeaf(caCert, caKey, benchNames)
	if err != nil {
		return err
	}
	_, squidKey, squidPEM, err := newCA("bench squid CA")
	if err != nil {
		return err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(squidKey)
	if err != nil {
		return err
	}
	squidPEM = append(squidPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})...)
	for name, b := range map[string][]byte{"origin-ca.pem": caPEM, "origin.pem": leafPEM, "squid-ca.pem": squidPEM} {
		if err := os.WriteFile(filepath.Join(*dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func newCA(cn string) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func newLeaf(ca *x509.Certificate, caKey *ecdsa.PrivateKey, names []string) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		DNSNames: names, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	out := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return append(out, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})...), nil
}

// origin serves /small (a short body) and /1m (1 MiB) over HTTPS,
// HTTP/1.1 only, X25519 only (like a server whose TLS library has no
// post-quantum exchange).
func origin(args []string) error {
	fs := flag.NewFlagSet("origin", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	certFile := fs.String("cert", "origin.pem", "leaf certificate and key")
	fs.Parse(args)
	cert, err := tls.LoadX509KeyPair(*certFile, *certFile)
	if err != nil {
		return err
	}
	big := make([]byte, 1<<20)
	mux := http.NewServeMux()
	mux.HandleFunc("/small", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "13")
		io.WriteString(w, "hello, bench\n")
	})
	mux.HandleFunc("/close", func(w http.ResponseWriter, _ *http.Request) {
		// The short body on a connection the origin closes after it: a
		// proxy cannot reuse its upstream connection for the next request.
		w.Header().Set("Connection", "close")
		w.Header().Set("Content-Length", "13")
		io.WriteString(w, "hello, bench\n")
	})
	mux.HandleFunc("/1m", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(big)))
		w.Write(big)
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	srv := &http.Server{
		ErrorLog:          log.New(io.Discard, "", 0), // the port probe's handshake errors
		Handler:           mux,
		ReadHeaderTimeout: 2 * time.Minute,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"},
			CurvePreferences: []tls.CurveID{tls.X25519}},
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	go waitSignal(func() { srv.Close() })
	if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func waitSignal(f func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
	f()
}

const benchPolicy = `version = 1
mode = "enforce"

[categories.bench]
kind = "public_web"
hosts = ["origin.example.test"]
ports = ["1-65535"]

[categories.snis]
kind = "public_web"
hosts = ["*.sni.example.test"]
ports = ["1-65535"]

[categories.tunnel]
kind = "public_web"
hosts = ["splice.example.test"]
ports = ["1-65535"]
inspect = false
`

type resolver struct{}

func (resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if h := strings.ToLower(host); slices.Contains(benchNames, h) || strings.HasSuffix(h, ".sni.example.test") {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// airlock runs Airlock's explicit proxy with the bench policy.
func airlock(args []string) error {
	fs := flag.NewFlagSet("airlock", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "explicit listener address")
	stateDir := fs.String("state-dir", "", "CA state directory")
	originCA := fs.String("origin-ca", "origin-ca.pem", "the origin's CA (trusted upstream)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile here until stopped")
	traceFile := fs.String("trace", "", "write an execution trace here until stopped")
	fs.Parse(args)
	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		if err != nil {
			return err
		}
		trace.Start(f)
		defer trace.Stop()
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	parsed, err := policies.Parse("bench.toml", []byte(benchPolicy))
	if err != nil {
		return err
	}
	// The origin on loopback is reachable as a lab's upstream allow-range.
	pol := policies.Bind(parsed, policies.Operator{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	ca, err := certs.Open(*stateDir)
	if err != nil {
		return err
	}
	extra, err := os.ReadFile(*originCA)
	if err != nil {
		return err
	}
	p, err := proxy.New(proxy.Config{
		CA: ca,
		Identify: proxy.IdentifierFunc(func(a netip.Addr) (proxy.Sandbox, bool) {
			return proxy.Sandbox{ID: "bench", Policy: pol}, a.IsLoopback()
		}),
		Resolver:   resolver{},
		Emitter:    audit.NewJSONL(io.Discard), // the stream's own encoder and hash chain; the bytes are discarded
		Logger:     slog.New(slog.DiscardHandler),
		RootCAs:    x509.NewCertPool(),
		ExtraCAPEM: [][]byte{extra},
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	go waitSignal(func() { p.Close() })
	if err := p.ServeExplicit(ln); !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// result is one load run.
type result struct {
	Requests int64   `json:"requests"`
	Errors   int64   `json:"errors"`
	Seconds  float64 `json:"seconds"`
	ReqPerS  float64 `json:"req_per_s"`
	MiBPerS  float64 `json:"mib_per_s"`
	P50US    float64 `json:"p50_us"`
	P99US    float64 `json:"p99_us"`
	CPUS     float64 `json:"client_cpu_s"` // the load generator's own CPU time
}

// load runs conns clients for a duration against url, through proxy when
// set, each client on its own connection.
func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	target := fs.String("url", "", "https URL")
	via := fs.String("proxy", "", "HTTP proxy address (CONNECT); empty: direct")
	dial := fs.String("dial", "", "direct: connect here instead of resolving the URL's host")
	conns := fs.Int("c", 1, "connections")
	dur := fs.Duration("d", 3*time.Second, "duration")
	newConn := fs.Bool("new-conn", false, "a new connection (and TLS handshake) per request")
	caFiles := fs.String("ca", "", "comma-separated CA PEM files to trust")
	fs.Parse(args)
	roots := x509.NewCertPool()
	for _, f := range strings.Split(*caFiles, ",") {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		roots.AppendCertsFromPEM(b)
	}
	var (
		n, errs, bytes atomic.Int64
		mu             sync.Mutex
		lat            []time.Duration
		wg             sync.WaitGroup
	)
	deadline := time.Now().Add(*dur)
	start := time.Now()
	for range *conns {
		tr := &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: roots, CurvePreferences: []tls.CurveID{tls.X25519}},
			MaxConnsPerHost:     1,
			MaxIdleConnsPerHost: 1,
			DisableKeepAlives:   *newConn,
			DisableCompression:  true,
		}
		if *via != "" {
			u, _ := url.Parse("http://" + *via)
			tr.Proxy = http.ProxyURL(u)
		} else if *dial != "" {
			d := &net.Dialer{}
			tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, *dial)
			}
		}
		wg.Go(func() {
			defer tr.CloseIdleConnections()
			var mine []time.Duration
			buf := make([]byte, 64<<10)
			for time.Now().Before(deadline) {
				t0 := time.Now()
				resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Get(*target)
				if err != nil {
					errs.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				var got int64
				for {
					k, rerr := resp.Body.Read(buf)
					got += int64(k)
					if rerr != nil {
						break
					}
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs.Add(1)
					continue
				}
				mine = append(mine, time.Since(t0))
				n.Add(1)
				bytes.Add(got)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	slices.Sort(lat)
	r := result{Requests: n.Load(), Errors: errs.Load(), Seconds: secs,
		ReqPerS: float64(n.Load()) / secs, MiBPerS: float64(bytes.Load()) / secs / (1 << 20)}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		r.CPUS = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	}
	if len(lat) > 0 {
		r.P50US = float64(lat[len(lat)/2].Microseconds())
		r.P99US = float64(lat[len(lat)*99/100].Microseconds())
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// idle opens n spliced TLS tunnels through the proxy, leaves them idle,
// and reports the proxy process's resident memory.
func idle(args []string) error {
	fs := flag.NewFlagSet("idle", flag.ExitOnError)
	via := fs.String("proxy", "", "proxy address")
	target := fs.String("target", "", "host:port to CONNECT to (a spliced name)")
	n := fs.Int("n", 10000, "tunnels")
	pid := fs.Int("pid", 0, "proxy process id (for its RSS)")
	caFiles := fs.String("ca", "", "CA PEM file the origin uses")
	fs.Parse(args)
	roots := x509.NewCertPool()
	b, err := os.ReadFile(*caFiles)
	if err != nil {
		return err
	}
	roots.AppendCertsFromPEM(b)
	host, _, _ := net.SplitHostPort(*target)
	before := rssMiB(*pid)
	var (
		mu    sync.Mutex
		conns []net.Conn
		fails atomic.Int64
		wg    sync.WaitGroup
		sem   = make(chan struct{}, 64)
	)
	start := time.Now()
	for range *n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := tunnel(*via, *target)
			if err != nil {
				fails.Add(1)
				return
			}
			tc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: roots, CurvePreferences: []tls.CurveID{tls.X25519}})
			tc.SetDeadline(time.Now().Add(30 * time.Second))
			if err := tc.Handshake(); err != nil {
				fails.Add(1)
				c.Close()
				return
			}
			tc.SetDeadline(time.Time{})
			mu.Lock()
			conns = append(conns, tc)
			mu.Unlock()
		})
	}
	wg.Wait()
	setup := time.Since(start)
	time.Sleep(2 * time.Second)
	after := rssMiB(*pid)
	for _, c := range conns {
		c.Close()
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"tunnels": len(conns), "failed": fails.Load(), "setup_s": setup.Seconds(),
		"rss_before_mib": before, "rss_mib": after,
	})
}

func tunnel(via, target string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", via, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	buf := make([]byte, 0, 128)
	one := make([]byte, 1)
	for !strings.HasSuffix(string(buf), "\r\n\r\n") {
		if _, err := c.Read(one); err != nil || len(buf) > 1024 {
			c.Close()
			return nil, fmt.Errorf("CONNECT %s: %v", target, err)
		}
		buf = append(buf, one[0])
	}
	if !strings.HasPrefix(string(buf), "HTTP/1.1 200") {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %q", target, buf)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

func rssMiB(pid int) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			var kb float64
			fmt.Sscan(f[1], &kb)
			return kb / 1024
		}
	}
	return 0
}

// snis measures what minting a leaf adds to a new MITM connection: it
// opens 2n new connections through the proxy, paced (one every -interval,
// open loop, so the load generator never saturates the machine), taking
// turns between a server name never seen before (the proxy mints a leaf)
// and one cached name (minted before the run). Every request asks the
// origin to close its connection, so both kinds also pay the same new
// upstream connection and handshake; the difference between the two
// distributions is the mint.
func snis(args []string) error {
	fs := flag.NewFlagSet("snis", flag.ExitOnError)
	via := fs.String("proxy", "", "proxy address")
	port := fs.Int("port", 0, "origin port")
	n := fs.Int("n", 1000, "unique names (and as many cached-name connections)")
	interval := fs.Duration("interval", 5*time.Millisecond, "time between connection starts")
	caFiles := fs.String("ca", "", "comma-separated CA PEM files")
	fs.Parse(args)
	roots := x509.NewCertPool()
	for _, f := range strings.Split(*caFiles, ",") {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		roots.AppendCertsFromPEM(b)
	}
	u, _ := url.Parse("http://" + *via)
	tr := &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: roots, CurvePreferences: []tls.CurveID{tls.X25519}}}
	cl := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	// get returns the whole request's time and its TLS handshake's (with
	// the proxy, after CONNECT: where a mint happens).
	get := func(name string) (time.Duration, time.Duration, error) {
		var hs0, hs1 time.Time
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			TLSHandshakeStart: func() { hs0 = time.Now() },
			TLSHandshakeDone:  func(tls.ConnectionState, error) { hs1 = time.Now() },
		})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://%s:%d/close", name, *port), nil)
		t0 := time.Now()
		resp, err := cl.Do(req)
		if err != nil {
			return 0, 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, 0, fmt.Errorf("status %d", resp.StatusCode)
		}
		return time.Since(t0), hs1.Sub(hs0), nil
	}
	const cached = "cached.sni.example.test"
	if _, _, err := get(cached); err != nil { // mint it before the run
		return err
	}
	var (
		mu               sync.Mutex
		uniq, same       []time.Duration // whole requests
		uniqTLS, sameTLS []time.Duration // their TLS handshakes with the proxy
		e1, e2           int
		wg               sync.WaitGroup
	)
	stamp := time.Now().UnixNano()
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for i := range 2 * *n {
		<-tick.C
		unique := i%2 == 0
		name := cached
		if unique {
			name = fmt.Sprintf("n%d-%d.sni.example.test", stamp, i/2)
		}
		wg.Go(func() {
			d, hs, err := get(name)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && unique:
				e1++
			case err != nil:
				e2++
			case unique:
				uniq, uniqTLS = append(uniq, d), append(uniqTLS, hs)
			default:
				same, sameTLS = append(same, d), append(sameTLS, hs)
			}
		})
	}
	wg.Wait()
	for _, l := range [][]time.Duration{uniq, same, uniqTLS, sameTLS} {
		slices.Sort(l)
	}
	pct := func(l []time.Duration, q int) float64 {
		if len(l) == 0 {
			return 0
		}
		return float64(l[len(l)*q/100].Microseconds())
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"interval_us":   interval.Microseconds(),
		"unique_p50_us": pct(uniq, 50), "unique_p99_us": pct(uniq, 99), "unique_errors": e1,
		"cached_p50_us": pct(same, 50), "cached_p99_us": pct(same, 99), "cached_errors": e2,
		"unique_tls_p50_us": pct(uniqTLS, 50), "unique_tls_p99_us": pct(uniqTLS, 99),
		"cached_tls_p50_us": pct(sameTLS, 50), "cached_tls_p99_us": pct(sameTLS, 99),
	})
}
