package proxy

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"airlock/policies"
)

// BenchmarkMITMKeepAliveProxyOnly prices the proxy's own work on an
// inspected HTTP/1.1 keep-alive request: the client and the origin are
// raw TLS loops that allocate nothing per request, so allocs/op is
// (almost) all the proxy's, unlike BenchmarkMITMKeepAlive whose net/http
// client and origin allocate too. The policy is the world's, with the raw
// origin's port for docs.example.test.
func BenchmarkMITMKeepAliveProxyOnly(b *testing.B) {
	_, caCert, caKey, caDER := testCA(b, "raw origin test CA")
	leaf := leafFor(b, caCert, caKey, worldNames)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	var accepts atomic.Int64
	go rawOrigin(ln, &tls.Config{Certificates: []tls.Certificate{leaf}, NextProtos: []string{"http/1.1"}}, &accepts)
	origin := netip.MustParseAddrPort(ln.Addr().String())
	// The world's policy, with the raw origin's port where the world's
	// HTTP/1.1-only origin's is (the world's other ports do not matter).
	src := strings.NewReplacer("TLSPORT", "9", "BADPORT", "10", "PLAINPORT", "11",
		"H1PORT", strconv.Itoa(int(origin.Port()))).Replace(testPolicy)
	parsed, err := policies.Parse("test.toml", []byte(src))
	if err != nil {
		b.Fatal(err)
	}
	pol := policies.Bind(parsed, worldOperator) // as newEnv's: loopback upstreams reachable
	e := newEnv(b, func(c *Config) {
		c.Emitter = discardEmitter{}
		c.ExtraCAPEM = append(c.ExtraCAPEM, pemCert(caDER))
		c.Identify = IdentifierFunc(func(a netip.Addr) (Sandbox, bool) {
			return Sandbox{ID: "sb1", Policy: pol}, a == origin.Addr()
		})
	})

	c := tls.Client(e.dialTransparent(origin), &tls.Config{ServerName: "docs.example.test",
		RootCAs: e.clientRoots(), CurvePreferences: []tls.CurveID{tls.X25519}, NextProtos: []string{"http/1.1"}})
	b.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Minute))
	req := []byte("GET /b HTTP/1.1\r\nHost: docs.example.test:" + strconv.Itoa(int(origin.Port())) +
		"\r\nUser-Agent: Go-http-client/1.1\r\nAccept: */*\r\n\r\n")
	buf := make([]byte, 64<<10)
	get := func() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if err := readRawResponse(c, buf); err != nil {
			b.Fatal(err)
		}
	}
	get()
	b.ReportAllocs()
	cpu0 := procCPU()
	for b.Loop() {
		get()
	}
	b.ReportMetric(float64((procCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	if n := accepts.Load(); n != 1 {
		b.Fatalf("the proxy opened %d upstream connections, want 1 (keep-alive)", n)
	}
}

var rawOriginResponse = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n" +
	"Date: Mon, 30 Nov 2026 17:00:00 GMT\r\nContent-Length: 31\r\n\r\norigin GET docs.example.test /b")

// rawOrigin answers every request on every connection with
// rawOriginResponse (bodiless requests only).
func rawOrigin(ln net.Listener, conf *tls.Config, accepts *atomic.Int64) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		accepts.Add(1)
		go func() {
			c := tls.Server(nc, conf)
			defer c.Close()
			buf := make([]byte, 64<<10)
			n := 0
			for {
				m, err := c.Read(buf[n:])
				if err != nil {
					return
				}
				n += m
				for {
					i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
					if i < 0 {
						break
					}
					if _, err := c.Write(rawOriginResponse); err != nil {
						return
					}
					n = copy(buf, buf[i+4:n])
				}
			}
		}()
	}
}

// readRawResponse reads one response with a Content-Length body.
func readRawResponse(c io.Reader, buf []byte) error {
	n := 0
	for {
		m, err := c.Read(buf[n:])
		if err != nil {
			return err
		}
		n += m
		i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
		if i < 0 {
			continue
		}
		head := buf[:i+2]
		if !bytes.HasPrefix(head, []byte("HTTP/1.1 200 ")) {
			return io.ErrUnexpectedEOF
		}
		rest := head
		for {
			j := bytes.Index(rest, []byte("\r\n"))
			if j < 0 {
				return io.ErrUnexpectedEOF
			}
			rest = rest[j+2:]
			if len(rest) > 16 && bytes.EqualFold(rest[:16], []byte("content-length: ")) {
				rest = rest[16:]
				break
			}
		}
		k := bytes.IndexByte(rest, '\r')
		cl, err := strconv.Atoi(string(rest[:k]))
		if err != nil {
			return err
		}
		if n >= i+4+cl {
			return nil
		}
	}
}
