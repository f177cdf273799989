// Command proxy is the helper of bench/proxy.sh: it makes the test
// certificates, runs an HTTPS origin, runs Airlock's proxy with a bench
// policy, and generates load through an HTTP proxy (CONNECT) or directly,
// printing one JSON line of results. Loopback only.
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
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
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
		fmt.Fprintln(os.Stderr, "usage: proxy mkcerts|origin|airlock|load [flags]")
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
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/proxy:", err)
		os.Exit(1)
	}
}

var benchNames = []string{"origin.example.test", "splice.example.test"}

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
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
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

[categories.tunnel]
kind = "public_web"
hosts = ["splice.example.test"]
ports = ["1-65535"]
inspect = false
`

type resolver struct{}

func (resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if slices.Contains(benchNames, strings.ToLower(host)) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// jsonEmitter serializes every event, as the real stream does, and
// discards the bytes: the benchmark pays for event encoding.
type jsonEmitter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (j *jsonEmitter) Emit(e audit.Event) {
	j.mu.Lock()
	j.enc.Encode(e)
	j.mu.Unlock()
}

// airlock runs Airlock's explicit proxy with the bench policy.
func airlock(args []string) error {
	fs := flag.NewFlagSet("airlock", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "explicit listener address")
	stateDir := fs.String("state-dir", "", "CA state directory")
	originCA := fs.String("origin-ca", "origin-ca.pem", "the origin's CA (trusted upstream)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile here until stopped")
	fs.Parse(args)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	pol, err := policies.Parse("bench.toml", []byte(benchPolicy))
	if err != nil {
		return err
	}
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
		Resolver:      resolver{},
		Emitter:       &jsonEmitter{enc: json.NewEncoder(io.Discard)},
		Logger:        slog.New(slog.DiscardHandler),
		UpstreamAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		RootCAs:       x509.NewCertPool(),
		ExtraCAPEM:    [][]byte{extra},
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
	if len(lat) > 0 {
		r.P50US = float64(lat[len(lat)/2].Microseconds())
		r.P99US = float64(lat[len(lat)*99/100].Microseconds())
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}
