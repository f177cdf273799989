//go:build !airlock_thin

package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/serve"
)

// mcpPath is where the streamable HTTP endpoint is served.
const mcpPath = "/mcp"

// mcpHTTP configures `airlock mcp --http`.
type mcpHTTP struct {
	addr      string // host:port to listen on
	tokenFile string // the bearer token every request must carry
	certFile  string // TLS certificate and key (required off loopback)
	keyFile   string
}

// check validates the options before anything listens.
func (o mcpHTTP) check() error {
	if o.tokenFile == "" {
		return errors.New("mcp --http: give --token-file (the bearer token every client must send, e.g. the appliance's control.token_file)")
	}
	if (o.certFile == "") != (o.keyFile == "") {
		return errors.New("mcp --http: give both --tls-cert and --tls-key, or neither")
	}
	host, _, err := net.SplitHostPort(o.addr)
	if err != nil {
		return fmt.Errorf("mcp --http %q: want host:port, e.g. 127.0.0.1:8765: %w", o.addr, err)
	}
	if o.certFile == "" && !loopbackHost(host) {
		return fmt.Errorf("mcp --http %s: not a loopback address, and the token would cross the network in clear: "+
			"give --tls-cert and --tls-key, or listen on 127.0.0.1", o.addr)
	}
	return nil
}

func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// serveMCPHTTP serves s over MCP's streamable HTTP transport at mcpPath on
// o.addr until ctx ends. ready, when set, gets the listening address.
func serveMCPHTTP(ctx context.Context, s *mcp.Server, o mcpHTTP, log *slog.Logger, ready func(net.Addr)) error {
	if err := o.check(); err != nil {
		return err
	}
	token, err := serve.ReadToken(o.tokenFile)
	if err != nil {
		return fmt.Errorf("mcp --http: %w", err)
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("mcp --http: %w", err)
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{Logger: log, SessionTimeout: 30 * time.Minute})
	mux := http.NewServeMux()
	mux.Handle(mcpPath, requireBearer(token, log, h))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if ready != nil {
		ready(ln.Addr())
	}
	if o.certFile != "" {
		err = srv.ServeTLS(ln, o.certFile, o.keyFile)
	} else {
		err = srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("mcp --http: %w", err)
}

// requireBearer lets through only requests with "Authorization: Bearer
// TOKEN"; it compares digests in constant time (so neither the content nor
// the length of the token leaks) and logs every refusal with its reason,
// never the token.
func requireBearer(token string, log *slog.Logger, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reason := ""
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch d := sha256.Sum256([]byte(got)); {
		case !ok || got == "":
			reason = "no bearer token"
		case subtle.ConstantTimeCompare(d[:], want[:]) != 1:
			reason = "wrong bearer token"
		}
		if reason == "" {
			next.ServeHTTP(w, r)
			return
		}
		log.Warn("mcp: request refused", "reason", reason, "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
		w.Header().Set("WWW-Authenticate", `Bearer realm="airlock mcp"`)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, "airlock mcp: unauthorized: "+reason+"\n")
	})
}
