package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"airlock/proxy/internal/h1"
	"airlock/proxy/internal/rawio"
)

// mitm terminates the client's TLS with a leaf for the approved name and
// serves its requests (HTTP/2 or HTTP/1.1 by ALPN), deciding each again.
func (p *Proxy) mitm(ctx context.Context, f *flow, c net.Conn, name string, h Hello) closeReason {
	f.handling = handleInspect
	p.emitDecision(f)
	protos := []string{"http/1.1"}
	if slices.Contains(h.ALPN, "h2") {
		protos = []string{"h2", "http/1.1"}
	}
	tc, err := p.handshake(c, name, protos)
	if err != nil {
		return reasonHandshake
	}
	sc := p.newScope(f, "https", name, f.port, false)
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		return p.serveH2(ctx, sc, tc)
	}
	return p.serveHTTP1(ctx, sc, tc, nil)
}

func (p *Proxy) handshake(c net.Conn, name string, protos []string) (*tls.Conn, error) {
	cert, err := p.cfg.CA.Leaf(name)
	if err != nil {
		return nil, fmt.Errorf("proxy: leaf for %q: %w", name, err)
	}
	conf := mitmH1
	if len(protos) > 1 {
		conf = mitmH2
	}
	lc := &leafConn{ClientConn: rawio.ClientConn{Conn: c}, cert: cert}
	tc := tls.Server(lc, conf)
	c.SetDeadline(time.Now().Add(p.cfg.ReadHeaderTimeout))
	err = tc.Handshake()
	c.SetDeadline(time.Time{})
	if err != nil {
		return nil, err
	}
	// The sniffed bytes are behind: from now on the socket is read and
	// written with raw system calls, counted into the flow.
	if sock, f, ok := rawUnder(c); ok {
		if r := rawio.NewSocket(sock); r != nil && f != nil {
			lc.UseRaw(r, &f.up, &f.down)
		} else if r != nil {
			lc.UseRaw(r, nil, nil)
		}
	}
	return tc, nil
}

// The client-facing TLS configurations are shared by every connection (no
// per-connection config, and session tickets one connection issued can
// resume another); the leaf for the connection's approved name rides on
// the connection itself.
var (
	mitmH1 = mitmConfig("http/1.1")
	mitmH2 = mitmConfig("h2", "http/1.1")
)

func mitmConfig(protos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: protos,
		GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if lc, ok := hi.Conn.(*leafConn); ok && lc.cert != nil {
				return lc.cert, nil
			}
			return nil, errors.New("proxy: no leaf for this connection")
		},
		// Full-size records from the first byte: the client is on the
		// same host or network, not behind a slow start.
		DynamicRecordSizingDisabled: true,
	}
}

// leafConn carries the leaf minted for the name the connection was
// approved for (never the name the client asks for in the handshake),
// over the socket that batches its records (rawio.ClientConn).
type leafConn struct {
	rawio.ClientConn
	cert *tls.Certificate
}

// explainTLS answers a denied TLS connection with a 403 over TLS with the
// appliance CA, so clients that trust it see why; clients that do not
// simply fail the handshake.
func (p *Proxy) explainTLS(f *flow, c net.Conn, name string) {
	tc, err := p.handshake(c, name, []string{"http/1.1"})
	if err != nil {
		return
	}
	br := bufio.NewReader(tc)
	tc.SetReadDeadline(time.Now().Add(p.cfg.SniffTimeout))
	req, _, err := h1.ReadRequest[reqSlot](br, p.cfg.MaxHeaderBytes)
	if err != nil {
		req = nil
	}
	h1.WriteRefusal(tc, reject(req, f.id, http.StatusForbidden, f.verdict), req != nil && req.Method == http.MethodHead)
	tc.Close()
}
