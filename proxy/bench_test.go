package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"testing"
	"time"
)

// Benchmarks of the request paths (speed targets are benchmarks and the
// side-by-side script bench/proxy.sh, never timed tests).
//
// The MITM benchmarks reach the world's HTTP/1.1-only origin, as
// bench/proxy's origin is. Each reports, besides ns/op (for one client
// that is the latency of a request), the CPU time the whole process
// spent per request (client, proxy and origin together: compare with
// BenchmarkDirectKeepAlive, which has the same client and origin and no
// proxy) and allocations per request (proxy, client and origin).

func benchGet(b *testing.B, c *http.Client, url string) {
	b.Helper()
	b.ReportAllocs()
	buf := make([]byte, 64<<10)
	get := func() {
		resp, err := c.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := resp.Body.Read(buf); err != nil {
				break
			}
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	get() // the connection and its first request are not measured
	cpu0 := procCPU()
	for b.Loop() {
		get()
	}
	b.ReportMetric(float64((procCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// procCPU is the process's user plus system CPU time.
func procCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchClient is bench/proxy's load client: HTTP/1.1, X25519, one
// connection, keep-alive unless newConn, every connection dialed by dial.
func benchClient(e *env, dial func() net.Conn, roots bool, newConn bool) *http.Client {
	conf := &tls.Config{RootCAs: e.clientRoots(), CurvePreferences: []tls.CurveID{tls.X25519}}
	if roots {
		conf.RootCAs = e.w.roots
	}
	tr := &http.Transport{
		DialContext:         func(context.Context, string, string) (net.Conn, error) { return dial(), nil },
		TLSClientConfig:     conf,
		MaxConnsPerHost:     1,
		MaxIdleConnsPerHost: 1,
		DisableKeepAlives:   newConn,
		DisableCompression:  true,
	}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func benchEnv(b *testing.B) *env {
	return newEnv(b, func(c *Config) { c.Emitter = discardEmitter{} })
}

func (e *env) h1Dst() netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), e.w.h1Port)
}

func (e *env) h1URL(path string) string {
	return fmt.Sprintf("https://docs.example.test:%d%s", e.w.h1Port, path)
}

func (e *env) mitmClient(newConn bool) *http.Client {
	return benchClient(e, func() net.Conn { return e.dialTransparent(e.h1Dst()) }, false, newConn)
}

func (e *env) directClient() *http.Client {
	return benchClient(e, func() net.Conn {
		c, err := net.Dial("tcp", e.h1Dst().String())
		if err != nil {
			e.t.Fatal(err)
		}
		return c
	}, true, false)
}

func BenchmarkDirectKeepAlive(b *testing.B) {
	e := benchEnv(b)
	benchGet(b, e.directClient(), e.h1URL("/b"))
}

func BenchmarkMITMKeepAlive(b *testing.B) {
	e := benchEnv(b)
	benchGet(b, e.mitmClient(false), e.h1URL("/b"))
}

func BenchmarkMITMKeepAliveH2(b *testing.B) {
	e := benchEnv(b)
	benchGet(b, e.transparentClient(e.worldDst(), true), e.url("docs.example.test", "/b"))
}

func BenchmarkMITMNewConnection(b *testing.B) {
	e := benchEnv(b)
	benchGet(b, e.mitmClient(true), e.h1URL("/b"))
}

func BenchmarkDirect1MiB(b *testing.B) {
	e := benchEnv(b)
	b.SetBytes(1 << 20)
	benchGet(b, e.directClient(), e.h1URL("/big"))
}

func BenchmarkMITM1MiB(b *testing.B) {
	e := benchEnv(b)
	b.SetBytes(1 << 20)
	benchGet(b, e.mitmClient(false), e.h1URL("/big"))
}

func BenchmarkSpliceKeepAlive(b *testing.B) {
	e := benchEnv(b)
	tr := &http.Transport{
		DialContext:     func(ctx contextT, _, _ string) (net.Conn, error) { return e.dialTransparent(e.worldDst()), nil },
		TLSClientConfig: &tls.Config{RootCAs: e.w.roots},
	}
	b.Cleanup(tr.CloseIdleConnections)
	benchGet(b, &http.Client{Transport: tr}, fmt.Sprintf("https://splice.example.test:%d/b", e.w.tlsPort))
}

func BenchmarkSpliceNewConnection(b *testing.B) {
	e := benchEnv(b)
	tr := &http.Transport{
		DialContext:       func(ctx contextT, _, _ string) (net.Conn, error) { return e.dialTransparent(e.worldDst()), nil },
		TLSClientConfig:   &tls.Config{RootCAs: e.w.roots},
		DisableKeepAlives: true,
	}
	benchGet(b, &http.Client{Transport: tr}, fmt.Sprintf("https://splice.example.test:%d/b", e.w.tlsPort))
}

// BenchmarkSpliceNewConnectionExplicit is bench/proxy's splice path: a
// CONNECT tunnel per request through the explicit listener.
func BenchmarkSpliceNewConnectionExplicit(b *testing.B) {
	e := benchEnv(b)
	u, err := url.Parse("http://" + e.explicit)
	if err != nil {
		b.Fatal(err)
	}
	tr := &http.Transport{
		Proxy:             http.ProxyURL(u),
		TLSClientConfig:   &tls.Config{RootCAs: e.w.roots, CurvePreferences: []tls.CurveID{tls.X25519}},
		DisableKeepAlives: true,
	}
	benchGet(b, &http.Client{Transport: tr}, fmt.Sprintf("https://splice.example.test:%d/b", e.w.tlsPort))
}
