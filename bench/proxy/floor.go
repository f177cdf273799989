package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// floor runs the least a proxy on this machine can do for each way
// Airlock forwards, so the table shows what the machine leaves for the
// proxy's own work: a CONNECT proxy that answers 200 and then, with
// -mode splice, dials the origin and copies bytes both ways (Go copies
// TCP to TCP with splice(2)); with -mode tls, ends the client's TLS with
// the origin's own certificate, opens TLS to the origin and copies the
// plaintext both ways. It parses no HTTP inside the tunnel, decides
// nothing, logs nothing and pools no upstream connection: every client
// connection gets its own upstream one, dialed at -origin whatever the
// CONNECT names.
func floor(args []string) error {
	fs := flag.NewFlagSet("floor", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address (CONNECT)")
	mode := fs.String("mode", "splice", "splice: copy bytes; tls: decrypt and re-encrypt")
	originAddr := fs.String("origin", "", "the origin's host:port, dialed for every tunnel")
	certFile := fs.String("cert", "origin.pem", "tls: the certificate and key shown to clients")
	originCA := fs.String("origin-ca", "origin-ca.pem", "tls: the origin's CA")
	fs.Parse(args)
	if *originAddr == "" {
		return errors.New("floor: -origin is required")
	}
	var serverConf, clientConf *tls.Config
	switch *mode {
	case "splice":
	case "tls":
		cert, err := tls.LoadX509KeyPair(*certFile, *certFile)
		if err != nil {
			return err
		}
		pem, err := os.ReadFile(*originCA)
		if err != nil {
			return err
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("floor: no certificate in %s", *originCA)
		}
		serverConf = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
		clientConf = &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"},
			ClientSessionCache: tls.NewLRUClientSessionCache(256)}
	default:
		return fmt.Errorf("floor: -mode %q: want splice or tls", *mode)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	go waitSignal(func() { ln.Close() })
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go floorTunnel(c, *originAddr, serverConf, clientConf)
	}
}

// floorTunnel serves one CONNECT on c.
func floorTunnel(c net.Conn, originAddr string, serverConf, clientConf *tls.Config) {
	defer c.Close()
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	req, err := http.ReadRequest(br)
	if err != nil || req.Method != http.MethodConnect || br.Buffered() > 0 {
		return // a client sends its TLS only after the 200
	}
	c.SetReadDeadline(time.Time{})
	host, _, err := net.SplitHostPort(req.Host)
	if err != nil {
		return
	}
	up, err := net.Dial("tcp", originAddr)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	var client, upstream net.Conn = c, up
	if serverConf != nil {
		tc := tls.Server(c, serverConf)
		if err := tc.Handshake(); err != nil {
			return
		}
		conf := clientConf.Clone()
		conf.ServerName = host
		uc := tls.Client(up, conf)
		if err := uc.Handshake(); err != nil {
			return
		}
		defer tc.Close()
		defer uc.Close()
		client, upstream = tc, uc
	}
	var wg sync.WaitGroup
	wg.Go(func() { copyHalf(upstream, client) })
	copyHalf(client, upstream)
	wg.Wait()
}

// copyHalf copies src to dst until src ends, then ends dst's sending half
// (TCP or TLS) so the other side sees the end too.
func copyHalf(dst, src net.Conn) {
	io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		dst.Close()
	}
}
