//go:build !airlock_thin

package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"airlock/client"
	"airlock/serve"
)

func init() {
	var listen string
	c := &cobra.Command{
		Use:   "ui [--listen 127.0.0.1:PORT] [--url https://HOST:PORT --token-file FILE [--ca-file F | --fingerprint FP]]",
		Short: "Open the live view: a local port proxying to the appliance's control API",
		Long: `Serves the appliance's read-only live view (sandboxes, their state,
recent denials, links to reports, the lockdown state; updated live) on a
loopback port, proxied to the control socket with your access to it, and
prints the URL to open. With --url and --token-file (or $AIRLOCK_TOKEN)
it proxies to the control API's TCP listener (TLS, checked by --ca-file or
--fingerprint) instead, adding the principal's bearer token to every
request (a browser cannot send it itself). The URL carries a random key
made for this run: other local users who find the port get nothing
without it. Only GET and HEAD requests of what the page reads pass: the
page cannot change anything. Stop with Ctrl-C.

Examples:
  airlock ui
  airlock ui --url https://198.18.0.10:7443 --token-file ~/.config/airlock/token --ca-file airlock-ca.pem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			o := client.TLSOptions{CAFile: firstSet(remoteFlags.caFile, os.Getenv(client.EnvCAFile)),
				Fingerprint: firstSet(remoteFlags.fingerprint, os.Getenv(client.EnvFingerprint))}
			up, err := uiTarget(remoteFlags.url, remoteFlags.tokenFile, o)
			if err != nil {
				return err
			}
			cl := up.client()
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
			srv := &http.Server{Handler: uiProxy(up, key), ReadHeaderTimeout: 10 * time.Second}
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

// uiUpstream is where the live view's requests go: the control socket,
// or the TCP listener (base) with its bearer token.
type uiUpstream struct {
	socket string
	base   *url.URL
	token  string
	opts   client.TLSOptions
	tls    *tls.Config
}

// uiTarget is the socket (--socket, $AIRLOCK_SOCKET) or, with apiURL, the
// TCP listener (TLS, checked as o says) with the token read from tokenFile
// or $AIRLOCK_TOKEN.
func uiTarget(apiURL, tokenFile string, o client.TLSOptions) (uiUpstream, error) {
	if apiURL == "" {
		if tokenFile != "" {
			return uiUpstream{}, usagef("ui: --token-file goes with --url")
		}
		return uiUpstream{socket: apiClient().Socket()}, nil
	}
	u, err := url.Parse(apiURL)
	if err != nil || u.Scheme != "https" || u.Host == "" || strings.Trim(u.Path, "/") != "" {
		return uiUpstream{}, usagef("ui: --url %q: want https://HOST:PORT (the control API's TCP listener speaks TLS)", apiURL)
	}
	tok := os.Getenv(client.EnvToken)
	if tokenFile != "" {
		if tok, err = serve.ReadToken(tokenFile); err != nil {
			return uiUpstream{}, fmt.Errorf("ui: %w", err)
		}
	}
	if tok == "" {
		return uiUpstream{}, usagef("ui: --url needs --token-file (or $%s): the TCP listener takes only bearer requests", client.EnvToken)
	}
	cfg, err := o.ClientConfig(u.Hostname())
	if err != nil {
		return uiUpstream{}, fmt.Errorf("ui: %w", err)
	}
	return uiUpstream{base: &url.URL{Scheme: u.Scheme, Host: u.Host}, token: tok, opts: o, tls: cfg}, nil
}

func (up uiUpstream) client() *client.Client {
	if up.base != nil {
		c, err := client.NewRemote(up.base.String(), up.token, up.opts)
		if err != nil {
			return client.Failing(fmt.Errorf("ui: %w", err))
		}
		return c
	}
	return client.New(up.socket)
}

// uiProxy forwards GET and HEAD requests that carry the key (as ?key= once,
// then as a cookie) to the control API; everything else is refused.
func uiProxy(up uiUpstream, key string) http.Handler {
	d := net.Dialer{Timeout: 5 * time.Second}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.Header.Del("Cookie")
			r.Out.Header.Del("Authorization")
			if up.base != nil {
				r.SetURL(up.base)
				r.Out.Header.Set("Authorization", "Bearer "+up.token)
				return
			}
			r.SetURL(&url.URL{Scheme: "http", Host: "airlock"})
		},
		FlushInterval: -1, // server-sent events go through at once
	}
	if up.base == nil {
		rp.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", up.socket)
		}}
	} else {
		rp.Transport = &http.Transport{Proxy: nil, DialContext: d.DialContext, TLSClientConfig: up.tls}
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
