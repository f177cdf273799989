package h1

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"airlock/proxy/internal/rawio"
)

// Pool is an HTTP/1.1 client for requests without a body (GET, HEAD,
// see Direct): an exchange written and read by the goroutine serving the
// client, over a pooled connection — no hand-off to transport goroutines,
// so a keep-alive request costs no extra wake-ups. It dials only the
// checked addresses a request carries, and a pooled connection is reused
// only for a request whose checked addresses include the one it is
// connected to.
type Pool struct {
	cfg PoolConfig

	mu    sync.Mutex
	idle  map[upKey][]*upConn // oldest first
	n     int                 // idle connections in all lists
	sweep *time.Timer         // closes connections idle too long
}

// PoolConfig is what a Pool needs from its owner.
type PoolConfig struct {
	// Dial connects to the first reachable address of targets, the
	// exact addresses that were checked.
	Dial func(ctx context.Context, targets []netip.AddrPort) (net.Conn, error)
	// TLS returns a new configuration that verifies upstream servers.
	TLS            func() *tls.Config
	DialTimeout    time.Duration // a dial and TLS handshake
	MaxIdlePerHost int
	IdleTimeout    time.Duration // how long a pooled connection may stay idle
}

// NewPool returns an empty pool.
func NewPool(cfg PoolConfig) *Pool {
	return &Pool{cfg: cfg, idle: map[upKey][]*upConn{}}
}

type upKey struct {
	scheme, host string // host:port as the URL names it (the approved name)
}

// upConn is one pooled HTTP/1.1 upstream connection.
type upConn struct {
	c      net.Conn
	bulk   *rawio.BulkConn // under c's TLS (nil for http)
	remote netip.AddrPort
	lr     io.LimitedReader // under br: bounds a response head
	br     *bufio.Reader
	bw     *bufio.Writer
	dl     rawio.LazyDeadline
	idleAt time.Time
	flush  func() error // bw.Flush, made once
}

const (
	upHeadMax   = 1 << 20         // a response head
	upIOTimeout = 5 * time.Minute // without progress, reading or writing
)

// Idle is how many connections wait in the pool.
func (u *Pool) Idle() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.n
}

// CloseIdleConnections closes every pooled connection.
func (u *Pool) CloseIdleConnections() {
	u.mu.Lock()
	idle := u.idle
	u.idle, u.n = map[upKey][]*upConn{}, 0
	if u.sweep != nil {
		u.sweep.Stop()
		u.sweep = nil
	}
	u.mu.Unlock()
	for _, l := range idle {
		for _, c := range l {
			c.c.Close()
		}
	}
}

// Direct reports whether a prepared request may go through a Pool.
func Direct(req *http.Request) bool {
	return (req.Method == http.MethodGet || req.Method == http.MethodHead) &&
		(req.Body == nil || req.Body == http.NoBody) && req.Header["Upgrade"] == nil
}

// RoundTrip sends req, which Direct allows, to one of targets. remote is
// the address of the first connection it used (invalid when none was
// made), also when it fails.
func (u *Pool) RoundTrip(req *http.Request, targets []netip.AddrPort) (resp *http.Response, remote netip.AddrPort, err error) {
	key := upKey{scheme: req.URL.Scheme, host: req.URL.Host}
	for attempt := 0; ; attempt++ {
		uc, reused := u.get(key, targets)
		if uc == nil {
			if uc, err = u.dial(req.Context(), key, targets); err != nil {
				return nil, remote, err
			}
		}
		if !remote.IsValid() {
			remote = uc.remote
		}
		resp, err = u.exchange(uc, req)
		if err == nil {
			b := upBodyFor(resp.Body)
			*b = upBody{rc: resp.Body, u: u, key: key, uc: uc}
			// Reusable: the server keeps the connection and the body
			// has a length or chunks (not "until the connection closes").
			b.keep = !resp.Close && (resp.Body == http.NoBody || resp.ContentLength >= 0 || len(resp.TransferEncoding) > 0)
			if resp.Body == http.NoBody {
				b.release(true)
			} else {
				resp.Body = b
			}
			return resp, remote, nil
		}
		uc.c.Close()
		// A pooled connection the server closed while it was idle (it
		// sent nothing back): try once more on a fresh one (GET and HEAD
		// are idempotent).
		if !reused || attempt > 0 || !errors.Is(err, errStale) {
			return nil, remote, err
		}
	}
}

var errUnsent = errors.New("proxy: upstream answered before the request was sent")

var errStale = errors.New("proxy: pooled upstream connection was closed")

// exchange writes req and reads its response head.
func (u *Pool) exchange(uc *upConn, req *http.Request) (*http.Response, error) {
	uc.refresh()
	writeUpRequest(uc.bw, req)
	if uc.bulk != nil && uc.bulk.SendsWithRead() {
		// The request leaves from inside the read that waits for its
		// answer: no read that can only fail first.
		uc.bulk.SendWithRead(uc.flush)
	} else if err := uc.bw.Flush(); err != nil {
		return nil, fmt.Errorf("%w: %v", errStale, err)
	}
	uc.lr.N = upHeadMax
	for range 8 {
		resp, err := readUpResponse(uc.br, req)
		if uc.bulk != nil && uc.bulk.Disarm() {
			// Bytes the connection held answered before the request
			// left: never trust them.
			if resp != nil {
				resp.Body.Close()
			}
			return nil, errUnsent
		}
		if uc.bulk != nil && uc.bulk.SendErr() != nil {
			return nil, fmt.Errorf("%w: %v", errStale, uc.bulk.SendErr())
		}
		if err != nil {
			if uc.lr.N == upHeadMax && uc.br.Buffered() == 0 {
				err = fmt.Errorf("%w: %v", errStale, err) // not a byte came back
			}
			return nil, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			if resp.StatusCode == http.StatusSwitchingProtocols {
				return nil, errors.New("proxy: upstream switched protocols unasked")
			}
			continue // informational: the final response follows
		}
		uc.lr.N = math.MaxInt64
		return resp, nil
	}
	return nil, errors.New("proxy: too many informational responses")
}

// writeUpRequest writes a bodiless request in origin form.
func writeUpRequest(bw *bufio.Writer, req *http.Request) {
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	bw.WriteString(req.URL.RequestURI())
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(req.Host)
	bw.WriteString("\r\n")
	for k, vs := range req.Header {
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer", "Connection":
			continue
		}
		for _, v := range vs {
			writeField(bw, k, v)
		}
	}
	bw.WriteString("\r\n")
}

// refresh pushes the connection's deadline back, at most a few times
// per period.
func (uc *upConn) refresh() {
	if t, ok := uc.dl.Due(upIOTimeout); ok {
		uc.c.SetDeadline(t)
	}
}

// get takes a pooled connection for key whose address is among targets.
func (u *Pool) get(key upKey, targets []netip.AddrPort) (*upConn, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	l := u.idle[key]
	for i := len(l) - 1; i >= 0; i-- {
		uc := l[i]
		if !slices.Contains(targets, uc.remote) {
			continue
		}
		// An emptied list stays (its array takes the connection back
		// without an allocation); the sweep drops empty lists.
		u.idle[key] = slices.Delete(l, i, i+1)
		u.n--
		if time.Since(uc.idleAt) > u.cfg.IdleTimeout {
			go uc.c.Close()
			continue
		}
		return uc, true
	}
	return nil, false
}

// put pools a connection whose last response was read to its end.
func (u *Pool) put(key upKey, uc *upConn) {
	max := u.cfg.MaxIdlePerHost
	uc.idleAt = time.Now()
	u.mu.Lock()
	l := u.idle[key]
	if len(l) >= max || u.n >= 4*max {
		u.mu.Unlock()
		uc.c.Close()
		return
	}
	u.idle[key] = append(l, uc)
	u.n++
	if u.sweep == nil {
		u.sweep = time.AfterFunc(u.cfg.IdleTimeout/2, u.reap)
	}
	u.mu.Unlock()
}

// reap closes the connections idle for longer than the idle timeout, and
// runs again while any are left.
func (u *Pool) reap() {
	now := time.Now()
	var dead []*upConn
	u.mu.Lock()
	for k, l := range u.idle {
		i := 0
		for i < len(l) && now.Sub(l[i].idleAt) > u.cfg.IdleTimeout {
			i++
		}
		dead = append(dead, l[:i]...)
		u.n -= i
		if i == len(l) {
			delete(u.idle, k)
		} else if i > 0 {
			u.idle[k] = slices.Delete(l, 0, i)
		}
	}
	if u.n > 0 && u.sweep != nil {
		u.sweep.Reset(u.cfg.IdleTimeout / 2)
	} else {
		u.sweep = nil
	}
	u.mu.Unlock()
	for _, uc := range dead {
		uc.c.Close()
	}
}

// dial connects to the first reachable checked address and, for https,
// verifies the server's certificate for the approved name.
func (u *Pool) dial(ctx context.Context, key upKey, targets []netip.AddrPort) (*upConn, error) {
	ctx, cancel := context.WithTimeout(ctx, u.cfg.DialTimeout)
	defer cancel()
	c, err := u.cfg.Dial(ctx, targets)
	if err != nil {
		return nil, err
	}
	remote := remoteOf(c)
	var bulk *rawio.BulkConn
	if key.scheme == "https" {
		host, _, _ := net.SplitHostPort(key.host)
		conf := u.cfg.TLS()
		conf.ServerName = strings.Trim(host, "[]")
		conf.NextProtos = []string{"http/1.1"}
		bulk = rawio.NewBulkConn(c)
		tc := tls.Client(bulk, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		c = tc
	}
	uc := &upConn{c: c, bulk: bulk, remote: remote}
	uc.lr.R = c
	uc.br = bufio.NewReaderSize(&uc.lr, 8<<10)
	uc.bw = bufio.NewWriterSize(c, 4<<10)
	uc.flush = uc.bw.Flush
	return uc, nil
}

// remoteOf is the address c is connected to, IPv4 unmapped.
func remoteOf(c net.Conn) netip.AddrPort {
	var ap netip.AddrPort
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ap = ta.AddrPort()
	} else {
		ap, _ = netip.ParseAddrPort(c.RemoteAddr().String())
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// upBody is a direct-path response body: read to its end, it gives the
// connection back to the pool; closed early, it closes the connection.
// upBodyFor returns the storage for body's wrapper: allocated with the
// response when the fast parser built it, else new.
func upBodyFor(body io.ReadCloser) *upBody {
	if lb, ok := body.(*upLenBody); ok && lb.pr != nil {
		return &lb.pr.up
	}
	return new(upBody)
}

type upBody struct {
	rc   io.ReadCloser
	u    *Pool
	key  upKey
	uc   *upConn
	keep bool
	done bool
}

func (b *upBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	b.uc.refresh()
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.release(true)
	} else if err != nil {
		b.release(false)
	}
	return n, err
}

// ready reports whether the body's next bytes already wait in the
// connection's buffers.
func (b *upBody) ready() bool {
	return !b.done && (b.uc.br.Buffered() > 0 || b.uc.bulk != nil && b.uc.bulk.Buffered() > 0)
}

func (b *upBody) Close() error {
	b.release(false)
	return nil
}

// release ends the body once: the connection goes back to the pool only
// when the body ended cleanly, the server keeps it open and nothing
// unexpected follows the body.
func (b *upBody) release(clean bool) {
	if b.done {
		return
	}
	b.done = true
	if clean && b.keep && b.uc.br.Buffered() == 0 && (b.uc.bulk == nil || b.uc.bulk.Idle()) {
		b.u.put(b.key, b.uc)
		return
	}
	b.uc.c.Close()
}
