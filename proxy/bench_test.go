package proxy

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
)

// Benchmarks of the request paths (speed targets are benchmarks and the
// side-by-side script bench/proxy.sh, never timed tests).

func benchGet(b *testing.B, c *http.Client, url string) {
	b.Helper()
	for b.Loop() {
		resp, err := c.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

func BenchmarkMITMKeepAlive(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.Emitter = discardEmitter{} })
	benchGet(b, e.transparentClient(e.worldDst(), false), e.url("docs.example.test", "/b"))
}

func BenchmarkMITMKeepAliveH2(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.Emitter = discardEmitter{} })
	benchGet(b, e.transparentClient(e.worldDst(), true), e.url("docs.example.test", "/b"))
}

func BenchmarkMITMNewConnection(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.Emitter = discardEmitter{} })
	c := e.transparentClient(e.worldDst(), false)
	c.Transport.(*http.Transport).DisableKeepAlives = true
	benchGet(b, c, e.url("docs.example.test", "/b"))
}

func BenchmarkMITM1MiB(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.Emitter = discardEmitter{} })
	b.SetBytes(1 << 20)
	benchGet(b, e.transparentClient(e.worldDst(), false), e.url("docs.example.test", "/big"))
}

func BenchmarkSpliceKeepAlive(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.Emitter = discardEmitter{} })
	tr := &http.Transport{
		DialContext:     func(ctx contextT, _, _ string) (net.Conn, error) { return e.dialTransparent(e.worldDst()), nil },
		TLSClientConfig: &tls.Config{RootCAs: e.w.roots},
	}
	b.Cleanup(tr.CloseIdleConnections)
	benchGet(b, &http.Client{Transport: tr}, fmt.Sprintf("https://splice.example.test:%d/b", e.w.tlsPort))
}

func BenchmarkSpliceNewConnection(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.Emitter = discardEmitter{} })
	tr := &http.Transport{
		DialContext:       func(ctx contextT, _, _ string) (net.Conn, error) { return e.dialTransparent(e.worldDst()), nil },
		TLSClientConfig:   &tls.Config{RootCAs: e.w.roots},
		DisableKeepAlives: true,
	}
	benchGet(b, &http.Client{Transport: tr}, fmt.Sprintf("https://splice.example.test:%d/b", e.w.tlsPort))
}
