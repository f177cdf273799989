package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
)

// A body streamed through an inspected connection costs the proxy a TLS
// decryption, an encryption and a socket read and write on each side per
// byte. The cryptography is fixed; the system calls are not: crypto/tls
// writes every record (at most 16 KiB of plaintext) with a Write of its
// own and reads the socket into a buffer about one record long. Below the
// client's tls.Conn, leafConn gathers the records of one large write into
// one system call; below an upstream tls.Conn, bulkConn reads what the
// socket holds in large pieces while bytes stream.

// maxRecord is the most plaintext crypto/tls puts in one record: a write
// no longer than this is one record and gains nothing from a batch.
const maxRecord = 16 << 10

// batchMax bounds one batch's plaintext (and so its buffer).
const batchMax = bodyBufSize

// recordOverhead bounds what a record adds to its plaintext (header,
// nonce, content type, tag) for every cipher suite offered.
const recordOverhead = 64

var batchPool = sync.Pool{New: func() any {
	b := make([]byte, 0, batchMax+batchMax/maxRecord*recordOverhead)
	return &b
}}

// Write passes a record straight to the socket, or adds it to the open
// batch: a record written while a batch is open — by the batch's own tls
// Write or by another goroutine (an alert) — keeps its place in the byte
// stream.
func (c *leafConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.batch != nil {
		*c.batch = append(*c.batch, p...)
		c.mu.Unlock()
		return len(p), nil
	}
	c.mu.Unlock()
	return c.sockWrite(p)
}

// writeBatched writes p through tw, the tls.Conn over c, sending the
// records of each batchMax of p with one Write on the socket. On an error
// it reports only the plaintext of batches that left whole; the
// connection is not usable after it.
func (c *leafConn) writeBatched(tw io.Writer, p []byte) (int, error) {
	bp := batchPool.Get().(*[]byte)
	defer batchPool.Put(bp)
	var total int
	for len(p) > 0 {
		chunk := p[:min(len(p), batchMax)]
		*bp = (*bp)[:0]
		c.mu.Lock()
		c.batch = bp
		c.mu.Unlock()
		n, err := tw.Write(chunk)
		// Send under the lock: a record another goroutine writes now
		// follows the batch instead of overtaking it.
		c.mu.Lock()
		c.batch = nil
		var werr error
		if len(*bp) > 0 {
			_, werr = c.sockWrite(*bp)
		}
		c.mu.Unlock()
		if werr != nil {
			return total, werr
		}
		total += n
		if err != nil {
			return total, err
		}
		p = p[len(chunk):]
	}
	return total, nil
}

// bulkConn is the socket under an upstream tls.Conn. It reads into the
// caller's buffer until a read fills it (the socket holds more), then
// through a pooled large buffer until a read comes back short again, so
// an idle pooled connection holds no large buffer.
type bulkConn struct {
	net.Conn
	big  *[]byte // non-nil while bytes stream
	r, w int     // unread bytes of big
	keep bool    // the last refill was large: keep big for the next
	err  error   // the refill's error, after its bytes

	// A request and its answer: the next Read sends the request (send)
	// once it waits for the socket, then waits for the answer without
	// first trying a read that could only fail (no answer can precede
	// the request); sendErr is what sending returned.
	raw     *rawIO // nil when the socket gives no raw access
	armed   bool
	send    func() error
	sendErr error
	doSend  func() error // c.sendNow, made once
}

func (c *bulkConn) sendNow() error {
	c.sendErr = c.send()
	return c.sendErr
}

// newBulkConn wraps the socket under an upstream tls.Conn.
func newBulkConn(c net.Conn) *bulkConn {
	b := &bulkConn{Conn: c}
	if tc, ok := c.(*net.TCPConn); ok {
		b.raw = newRawIO(tc)
	}
	b.doSend = b.sendNow
	return b
}

// sendWithRead arms the next Read to call send first (see bulkConn).
func (c *bulkConn) sendWithRead(send func() error) {
	c.armed, c.send, c.sendErr = true, send, nil
}

// disarm reports whether an armed send never ran, and forgets it.
func (c *bulkConn) disarm() bool {
	pending := c.armed
	c.armed = false
	return pending
}

// readAfterSend is Read with an armed send: inside one raw read, the
// socket's readiness is reset, the request is sent, and the answer is
// waited for and read. Readiness that arrives after the reset wakes the
// wait, so an answer is never missed; bytes that arrived before the
// request was sent (a server speaking unasked) are read with the answer
// and fail its parse.
func (c *bulkConn) readAfterSend(p []byte) (int, error) {
	c.armed = false
	if c.raw == nil || len(p) == 0 {
		if c.sendErr = c.send(); c.sendErr != nil {
			return 0, c.sendErr
		}
		return c.Read(p)
	}
	n, err := c.raw.read(p, c.doSend)
	if err != nil {
		return 0, err
	}
	if n == len(p) {
		c.big = bulkPool.Get().(*[]byte)
	}
	return n, nil
}

// sockRead and Write use the socket's raw I/O when it has it.
func (c *bulkConn) sockRead(p []byte) (int, error) {
	if c.raw != nil {
		return c.raw.read(p, nil)
	}
	return c.Conn.Read(p)
}

func (c *bulkConn) Write(p []byte) (int, error) {
	if c.raw != nil {
		return c.raw.write(p)
	}
	return c.Conn.Write(p)
}

var errUnsent = errors.New("proxy: upstream answered before the request was sent")

const bulkBuf = 128 << 10

var bulkPool = sync.Pool{New: func() any { b := make([]byte, bulkBuf); return &b }}

func (c *bulkConn) Read(p []byte) (int, error) {
	if c.armed {
		return c.readAfterSend(p)
	}
	if c.big == nil {
		n, err := c.sockRead(p)
		if n == len(p) && n > 0 && err == nil {
			c.big = bulkPool.Get().(*[]byte)
		}
		return n, err
	}
	if c.r == c.w {
		if c.err != nil {
			err := c.err
			c.err = nil
			c.release()
			return 0, err
		}
		n, err := c.sockRead(*c.big)
		c.r, c.w, c.err = 0, n, err
		c.keep = n > len(*c.big)/4
		if n == 0 {
			c.err = nil
			c.release()
			return 0, err
		}
	}
	n := copy(p, (*c.big)[c.r:c.w])
	c.r += n
	if c.r == c.w && !c.keep && c.err == nil {
		c.release()
	}
	return n, nil
}

// buffered is how many bytes were read from the socket and not consumed.
func (c *bulkConn) buffered() int { return c.w - c.r }

// idle gives the large buffer back before the connection waits in the
// pool; it reports whether every byte read from the socket was consumed
// (a connection with bytes after its response must not be reused).
func (c *bulkConn) idle() bool {
	if c.r < c.w || c.err != nil {
		return false
	}
	c.release()
	return true
}

func (c *bulkConn) release() {
	if c.big != nil {
		bulkPool.Put(c.big)
		c.big, c.r, c.w = nil, 0, 0
	}
}

// CloseWrite half-closes when the underlying connection can.
func (c *bulkConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
