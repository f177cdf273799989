package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"airlock/client"
)

func init() {
	var listen string
	c := &cobra.Command{
		Use:   "ui [--listen 127.0.0.1:PORT]",
		Short: "Open the live view: a local port proxying to the appliance's socket",
		Long: `Serves the appliance's read-only live view (sandboxes, their state,
recent denials, links to reports, the lockdown state; updated live) on a
loopback port, proxied to the control socket with your access to it, and
prints the URL to open. The URL carries a random key made for this run:
other local users who find the port get nothing without it. Only GET and
HEAD requests pass: the page cannot change anything (it can read what the
API's GETs read, sandbox files and artifacts included). Stop with Ctrl-C.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			cl := apiClient()
			if _, err := cl.Health(ctx); err != nil {
				return err
			}
			host, _, err := net.SplitHostPort(listen)
			if err != nil {
				return usagef("ui: --listen %q: %v", listen, err)
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return usagef("ui: --listen %q: must be a loopback address (the view is as powerful as your socket access)", listen)
			}
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("ui: %w", err)
			}
			key := uiKey()
			srv := &http.Server{Handler: uiProxy(cl.Socket(), key), ReadHeaderTimeout: 10 * time.Second}
			go func() {
				<-ctx.Done()
				sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
				defer c()
				_ = srv.Shutdown(sctx)
			}()
			fmt.Fprintf(cmd.OutOrStdout(), "http://%s/ui/?key=%s\n", l.Addr(), key)
			fmt.Fprintln(cmd.ErrOrStderr(), "airlock: live view on the URL above; Ctrl-C to stop")
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "loopback address to serve on (port 0: any free port)")
	addSocketFlag(c)
	rootCmd.AddCommand(c)
}

func uiKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

const uiCookie = "airlock_ui"

// uiProxy forwards GET and HEAD requests that carry the key (as ?key= once,
// then as a cookie) to the control socket; everything else is refused.
func uiProxy(socket, key string) http.Handler {
	d := net.Dialer{Timeout: 5 * time.Second}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: "http", Host: "airlock"})
			r.Out.Header.Del("Cookie")
			r.Out.Header.Del("Authorization")
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socket)
		}},
		FlushInterval: -1, // server-sent events go through at once
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "the live view is read-only", http.StatusMethodNotAllowed)
			return
		}
		if k := r.URL.Query().Get("key"); k != "" && subtle.ConstantTimeCompare([]byte(k), []byte(key)) == 1 {
			http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: key, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			http.Redirect(w, r, "/ui/", http.StatusSeeOther)
			return
		}
		ck, err := r.Cookie(uiCookie)
		if err != nil || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(key)) != 1 {
			http.Error(w, "open the URL airlock ui printed (it carries the key)", http.StatusUnauthorized)
			return
		}
		if !uiPath(r.URL.Path) {
			http.NotFound(w, r)
			return
		}
		rp.ServeHTTP(w, r)
	})
}

// uiAPI is what the page reads of the control API, and all the view
// passes on: not sandbox files, artifacts or process output.
var uiAPI = []string{"/sandboxes", "/lockdown", "/logs", "/events/stream"}

// uiPath: the page (and the reports it links, under /ui/) or one of uiAPI.
func uiPath(p string) bool {
	if strings.HasPrefix(p, "/ui/") {
		return true
	}
	return slices.Contains(uiAPI, strings.TrimPrefix(p, client.APIVersion))
}
