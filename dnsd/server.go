package dnsd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"airlock/audit"
	"airlock/policies"
)

// Server is the resolver. New opens its sockets; Serve runs them.
type Server struct {
	cfg    Config
	log    *slog.Logger
	emit   audit.Emitter
	cache  *cache
	fwd    *forwarder
	guards guards
	noise  noiseLimiter

	// Strings for events, formatted once per value.
	clients   strMemo[netip.Addr]
	servers4  strMemo[netip.AddrPort]
	serverAny strMemo[net.Addr]
	rules     strMemo[policies.Rule]
	// EDE texts of policy denials, per rule name.
	blockTexts strMemo[string]
	bindings   *Bindings

	slowq       chan *packet // cache misses for idle workers (unbuffered)
	slowWorkers atomic.Int32

	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	pcs     []net.PacketConn
	lns     []net.Listener
	servers []*dns.Server
	closed  bool
}

// New validates cfg and opens the sockets of cfg.Listen. Close releases
// them, also when Serve is never called.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		emit:     cfg.Emitter,
		cache:    newCache(cfg.CacheSize, cfg.MinTTL, cfg.MaxTTL, cfg.NegativeTTL),
		bindings: NewBindings(cfg.BindingsSize, cfg.BindingsGrace),
		pcs:      append([]net.PacketConn(nil), cfg.PacketConns...),
		slowq:    make(chan *packet),
		lns:      append([]net.Listener(nil), cfg.Listeners...),
	}
	s.fwd = &forwarder{x: newNetExchanger((*upEvents)(s)), timeout: cfg.Timeout, attempt: cfg.AttemptTimeout,
		calls: make(map[cacheKey]*call), defaults: cfg.Upstreams}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for _, addr := range cfg.Listen {
		if err := s.listen(addr); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// listen opens UDPSockets SO_REUSEPORT UDP sockets and one TCP listener on
// addr (the same port for all, also when addr asks for port 0: then a port
// free for both is searched).
func (s *Server) listen(addr string) error {
	anyPort := strings.HasSuffix(addr, ":0")
	for try := 0; ; try++ {
		pcs, ln, err := s.listenOnce(addr)
		if err == nil {
			s.pcs, s.lns = append(s.pcs, pcs...), append(s.lns, ln)
			return nil
		}
		if !anyPort || !errors.Is(err, syscall.EADDRINUSE) || try == 20 {
			return err
		}
	}
}

func (s *Server) listenOnce(addr string) ([]net.PacketConn, net.Listener, error) {
	lc := net.ListenConfig{Control: reusePort}
	lc.SetMultipathTCP(false)
	var pcs []net.PacketConn
	closeAll := func() {
		for _, pc := range pcs {
			pc.Close()
		}
	}
	for i := 0; i < s.cfg.UDPSockets; i++ {
		pc, err := lc.ListenPacket(context.Background(), "udp", addr)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("dnsd: listen udp %s: %w", addr, err)
		}
		pcs = append(pcs, pc)
		addr = pc.LocalAddr().String()
	}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("dnsd: listen tcp %s: %w", addr, err)
	}
	return pcs, ln, nil
}

func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	})
	return errors.Join(err, serr)
}

// Addrs returns the local addresses of the UDP sockets and TCP listeners.
func (s *Server) Addrs() (udp, tcp []net.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pc := range s.pcs {
		udp = append(udp, pc.LocalAddr())
	}
	for _, ln := range s.lns {
		tcp = append(tcp, ln.Addr())
	}
	return udp, tcp
}

// Bindings is the ledger of names and addresses the sandboxes learned.
func (s *Server) Bindings() *Bindings { return s.bindings }

// Serve answers on every socket until ctx ends or Close is called, then
// closes them. It returns the first socket error, or nil after a clean stop.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	pcs, lns := s.pcs, s.lns
	s.mu.Unlock()
	errc := make(chan error, len(pcs)+len(lns)+1)
	for _, pc := range pcs {
		go func() { errc <- s.ServePacketConn(pc) }()
	}
	for _, ln := range lns {
		go func() { errc <- s.ServeListener(ln) }()
	}
	go s.sweeper()
	var err error
	select {
	case <-ctx.Done():
	case <-s.ctx.Done():
	case err = <-errc:
	}
	s.Close()
	return err
}

// ServePacketConn answers queries on pc until Close, which also closes pc.
// An IPv4 *net.UDPConn is read in batches with IP_PKTINFO, so replies leave
// from the address each query was sent to; other conns go through
// dns.Server.
func (s *Server) ServePacketConn(pc net.PacketConn) error {
	if !s.track(pc, nil) {
		return net.ErrClosed
	}
	if u, ok := pc.(*net.UDPConn); ok {
		if la, ok := u.LocalAddr().(*net.UDPAddr); ok && la.IP.To4() != nil {
			return s.serveUDP4(u)
		}
	}
	srv := &dns.Server{PacketConn: pc, Handler: s, UDPSize: dns.DefaultMsgSize,
		MsgAcceptFunc: acceptQueries, DecorateReader: s.noticeReader}
	return s.run(srv)
}

// ServeListener answers DNS over TCP on ln until Close (which closes ln), with read and idle
// deadlines on every connection and at most 16 connections per source.
func (s *Server) ServeListener(ln net.Listener) error {
	if !s.track(nil, ln) {
		return net.ErrClosed
	}
	idle := s.cfg.TCPIdleTimeout
	srv := &dns.Server{Listener: newLimitListener(ln), Handler: s, ReadTimeout: s.cfg.TCPReadTimeout,
		WriteTimeout: s.cfg.TCPReadTimeout, IdleTimeout: func() time.Duration { return idle }, MaxTCPQueries: 1000,
		MsgAcceptFunc: acceptQueries, DecorateReader: s.noticeReader}
	return s.run(srv)
}

// track adds a socket served after New to those Close closes; false when
// the server is already closed (the socket is then closed).
func (s *Server) track(pc net.PacketConn, ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		if pc != nil {
			pc.Close()
		}
		if ln != nil {
			ln.Close()
		}
		return false
	}
	if pc != nil && !slices.Contains(s.pcs, pc) {
		s.pcs = append(s.pcs, pc)
	}
	if ln != nil && !slices.Contains(s.lns, ln) {
		s.lns = append(s.lns, ln)
	}
	return true
}

func (s *Server) run(srv *dns.Server) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return net.ErrClosed
	}
	s.servers = append(s.servers, srv)
	s.mu.Unlock()
	err := srv.ActivateAndServe()
	if s.ctx.Err() != nil {
		return nil
	}
	return err
}

// sweeper drops expired guard state and bindings.
func (s *Server) sweeper() {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			s.guards.sweep(now)
			s.bindings.Sweep(now)
			s.reportSuppressed(now)
		}
	}
}

// Close stops serving and closes every socket. Safe to call more than once
// and after a partial New.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	servers, pcs, lns := s.servers, s.pcs, s.lns
	s.mu.Unlock()
	s.cancel()
	if x, ok := s.fwd.x.(*netExchanger); ok {
		x.close()
	}
	for _, srv := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = srv.ShutdownContext(ctx)
		cancel()
	}
	var errs []error
	for _, pc := range pcs {
		if err := pc.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	for _, ln := range lns {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
