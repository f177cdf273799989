package world

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

const bodyLimit = 64 << 10

// listenTCP opens a TCP listener inside the world's namespace.
func (w *World) listenTCP(addr netip.AddrPort) (net.Listener, error) {
	var ln net.Listener
	err := inNS(w.ns.handle, func() error {
		var err error
		ln, err = net.Listen("tcp", addr.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("world: listen tcp %s: %w", addr, err)
	}
	return ln, nil
}

// listenUDP opens a UDP socket inside the world's namespace.
func (w *World) listenUDP(addr netip.AddrPort) (net.PacketConn, error) {
	var pc net.PacketConn
	err := inNS(w.ns.handle, func() error {
		var err error
		pc, err = net.ListenPacket("udp", addr.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("world: listen udp %s: %w", addr, err)
	}
	return pc, nil
}

// roleAddrs returns a role's addresses (IPv4, then IPv6 when present).
func (w *World) roleAddrs(r Role) []netip.Addr {
	out := []netip.Addr{w.addrs[r]}
	if a := w.addrs6[r]; a.IsValid() {
		out = append(out, a)
	}
	return out
}

// site serves one role over HTTPS (tlsPorts) and plain HTTP (plainPorts).
type site struct {
	role       Role
	handler    http.Handler
	tlsPorts   []uint16
	plainPorts []uint16
	// conns records every accepted connection (and its SNI) too, for roles
	// that nothing may reach.
	conns bool
}

func (w *World) serveSite(ca *testCA, s site) error {
	cert, err := ca.leaf(w.names[s.role], w.roleAddrs(s.role)...)
	if err != nil {
		return err
	}
	tcfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	}
	if s.conns {
		tcfg.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
			w.log.add(Record{Kind: KindConn, Role: s.role, Proto: "tls", SNI: hi.ServerName,
				Remote: hi.Conn.RemoteAddr().String(), Local: hi.Conn.LocalAddr().String()})
			return nil, nil
		}
	}
	srv := &http.Server{
		Handler:           w.recordHTTP(s.role, s.handler),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	w.addCloser(srv)
	for _, a := range w.roleAddrs(s.role) {
		for _, p := range s.tlsPorts {
			ln, err := w.listenTCP(netip.AddrPortFrom(a, p))
			if err != nil {
				return err
			}
			w.serve(srv, tls.NewListener(w.maybeRecordConns(s, ln), tcfg))
		}
		for _, p := range s.plainPorts {
			ln, err := w.listenTCP(netip.AddrPortFrom(a, p))
			if err != nil {
				return err
			}
			w.serve(srv, w.maybeRecordConns(s, ln))
		}
	}
	return nil
}

func (w *World) serve(srv *http.Server, ln net.Listener) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			w.logger.Debug("world site stopped", "err", err)
		}
	}()
}

func (w *World) maybeRecordConns(s site, ln net.Listener) net.Listener {
	if !s.conns {
		return ln
	}
	return &recordingListener{Listener: ln, w: w, role: s.role}
}

// recordingListener records every accepted TCP connection.
type recordingListener struct {
	net.Listener
	w    *World
	role Role
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.w.log.add(Record{Kind: KindConn, Role: l.role, Proto: "tcp",
			Remote: c.RemoteAddr().String(), Local: c.LocalAddr().String()})
	}
	return c, err
}

// recordHTTP records every request (with up to bodyLimit bytes of body)
// before handing it on.
func (w *World) recordHTTP(role Role, next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, bodyLimit))
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
		path, query, _ := strings.Cut(r.RequestURI, "?")
		rec := Record{
			Kind: KindHTTP, Role: role, Method: r.Method, Host: r.Host,
			Path: path, Query: query, Header: r.Header.Clone(), Body: body,
			Remote: r.RemoteAddr,
		}
		if r.TLS != nil {
			rec.SNI = r.TLS.ServerName
		}
		if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			rec.Local = la.String()
		}
		w.log.add(rec)
		next.ServeHTTP(rw, r)
	})
}
