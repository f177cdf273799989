package proxy

import (
	"bytes"
	"errors"
	"net"
	"time"

	"airlock/proxy/internal/h1"
	"airlock/proxy/internal/rawio"
)

type sniffKind int

const (
	sniffNone  sniffKind = iota // the client sent nothing before the timeout
	sniffTLS                    // a complete ClientHello
	sniffHTTP                   // an HTTP/1 request line is starting
	sniffOther                  // bytes of some other protocol
)

// maxSniff bounds what the sniffer buffers: a ClientHello up to
// maxHandshakeLen spread over records.
const maxSniff = maxHandshakeLen + 8*recordHeaderLen + 1024

type sniffed struct {
	kind  sniffKind
	hello Hello
	conn  net.Conn // replays the sniffed bytes, then reads the client
}

// sniff reads the client's first bytes within the sniff timeout. A TLS
// ClientHello is read completely (reassembled across records and
// segments); an HTTP request is recognized by its method token; anything
// else is "other". A malformed ClientHello is an error.
func (p *Proxy) sniff(c net.Conn) (sniffed, error) {
	if err := c.SetReadDeadline(time.Now().Add(p.cfg.SniffTimeout)); err != nil {
		return sniffed{}, err
	}
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 0, 2048)
	for {
		if len(buf) == cap(buf) {
			if cap(buf) >= maxSniff {
				return sniffed{}, errors.New("proxy: sniff: first flight too large")
			}
			nb := make([]byte, len(buf), min(2*cap(buf), maxSniff))
			copy(nb, buf)
			buf = nb
		}
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if k, h, done, perr := classify(buf); done {
			return sniffed{kind: k, hello: h, conn: newPrefixConn(c, buf)}, perr
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if len(buf) == 0 {
					return sniffed{kind: sniffNone, conn: newPrefixConn(c, buf)}, nil
				}
				return sniffed{kind: sniffOther, conn: newPrefixConn(c, buf)}, nil
			}
			return sniffed{}, err
		}
	}
}

// classify looks at the bytes so far; done reports that it has decided.
func classify(b []byte) (sniffKind, Hello, bool, error) {
	if len(b) == 0 {
		return 0, Hello{}, false, nil
	}
	if b[0] == 22 {
		h, err := ParseClientHello(b)
		switch {
		case errors.Is(err, ErrNeedMore):
			return 0, Hello{}, false, nil
		case errors.Is(err, ErrNotTLS):
			return sniffOther, Hello{}, true, nil
		case err != nil:
			return sniffTLS, Hello{}, true, err
		}
		return sniffTLS, h, true, nil
	}
	return classifyHTTP(b)
}

// classifyHTTP recognizes "TOKEN SP" at the start of a request.
func classifyHTTP(b []byte) (sniffKind, Hello, bool, error) {
	sp := bytes.IndexByte(b, ' ')
	limit := min(len(b), 24)
	if sp < 0 {
		for _, c := range b[:limit] {
			if !h1.IsTokenChar(c) {
				return sniffOther, Hello{}, true, nil
			}
		}
		if len(b) >= 24 {
			return sniffOther, Hello{}, true, nil
		}
		return 0, Hello{}, false, nil
	}
	if sp == 0 || sp > 24 {
		return sniffOther, Hello{}, true, nil
	}
	for _, c := range b[:sp] {
		if !h1.IsTokenChar(c) {
			return sniffOther, Hello{}, true, nil
		}
	}
	return sniffHTTP, Hello{}, true, nil
}

// prefixConn replays buffered bytes before reading the connection.
type prefixConn struct {
	net.Conn
	pre []byte
}

func newPrefixConn(c net.Conn, pre []byte) net.Conn {
	if len(pre) == 0 {
		return c
	}
	return &prefixConn{Conn: c, pre: pre}
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		if len(c.pre) == 0 {
			c.pre = nil // release the sniff buffer
		}
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite half-closes when the underlying connection can.
func (c *prefixConn) CloseWrite() error {
	return rawio.CloseWrite(c.Conn)
}
