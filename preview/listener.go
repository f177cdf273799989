package preview

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// Limits of the preview listener: headers, slow clients, connections.
type Limits struct {
	ReadHeaderTimeout time.Duration // 0: 10s (slowloris)
	IdleTimeout       time.Duration // 0: 120s
	MaxHeaderBytes    int           // 0: 32 KiB
	MaxConns          int           // 0: 4096
}

// Server returns the preview listener's HTTP server (HTTP/1.1 and, with
// tlsCfg, HTTP/2) over m.
func (m *Manager) Server(tlsCfg *tls.Config, l Limits) *http.Server {
	def(&l.ReadHeaderTimeout, 10*time.Second)
	def(&l.IdleTimeout, 120*time.Second)
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = 32 << 10
	}
	if tlsCfg != nil {
		tlsCfg = tlsCfg.Clone()
		tlsCfg.NextProtos = []string{"h2", "http/1.1"}
		tlsCfg.MinVersion = tls.VersionTLS12
	}
	// The server's own complaints (a handshake cut off, a client gone) come
	// at the rate clients make them: debug, never a flood at info.
	return &http.Server{Handler: m, TLSConfig: tlsCfg, ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout: l.IdleTimeout, MaxHeaderBytes: l.MaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(m.cfg.Log.Handler(), slog.LevelDebug)}
}

// Listen wraps ln with the connection limit of l.
func Listen(ln net.Listener, l Limits) net.Listener {
	if l.MaxConns == 0 {
		l.MaxConns = 4096
	}
	return netutil.LimitListener(ln, l.MaxConns)
}
