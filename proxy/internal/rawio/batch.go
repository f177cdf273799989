package rawio

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// A body streamed through an inspected connection costs the proxy a TLS
// decryption, an encryption and a socket read and write on each side per
// byte. The cryptography is fixed; the system calls are not: crypto/tls
// writes every record (at most 16 KiB of plaintext) with a Write of its
// own and reads the socket into a buffer about one record long. Below the
// client's tls.Conn, ClientConn gathers the records of one large write
// into one system call; below an upstream tls.Conn, BulkConn reads what
// the socket holds in large pieces while bytes stream.

// MaxRecord is the most plaintext crypto/tls puts in one record: a write
// no longer than this is one record and gains nothing from a batch.
const MaxRecord = 16 << 10

// BatchMax bounds one batch's plaintext (and so its buffer).
const BatchMax = 64 << 10

// recordOverhead bounds what a record adds to its plaintext (header,
// nonce, content type, tag) for every cipher suite offered.
const recordOverhead = 64

var batchPool = sync.Pool{New: func() any {
	b := make([]byte, 0, BatchMax+BatchMax/MaxRecord*recordOverhead)
	return &b
}}

// ClientConn is the socket under the client's tls.Conn of an inspected
// connection. Writes under it may be gathered into batches (see
// WriteBatched); after the handshake it may read and write the socket
// with raw system calls (see UseRaw).
type ClientConn struct {
	net.Conn

	mu    sync.Mutex
	batch *[]byte // non-nil while a batch is open

	// After the handshake: the socket's raw I/O (nil: through Conn) and
	// the counters its bytes are added to (nil: not counted).
	raw      *Socket
	up, down *atomic.Int64
}

// UseRaw makes c read and write through s from now on, adding the bytes
// read to up and those written to down. Call it before c is used by more
// than one goroutine.
func (c *ClientConn) UseRaw(s *Socket, up, down *atomic.Int64) {
	c.raw, c.up, c.down = s, up, down
}

// Read reads the socket.
func (c *ClientConn) Read(p []byte) (int, error) {
	if c.raw == nil {
		return c.Conn.Read(p)
	}
	n, err := c.raw.Read(p)
	if c.up != nil {
		c.up.Add(int64(n))
	}
	return n, err
}

// sockWrite writes to the socket.
func (c *ClientConn) sockWrite(p []byte) (int, error) {
	if c.raw == nil {
		return c.Conn.Write(p)
	}
	n, err := c.raw.Write(p)
	if c.down != nil {
		c.down.Add(int64(n))
	}
	return n, err
}

// CloseWrite half-closes when the underlying connection can.
func (c *ClientConn) CloseWrite() error {
	return CloseWrite(c.Conn)
}

// Write passes a record straight to the socket, or adds it to the open
// batch: a record written while a batch is open — by the batch's own tls
// Write or by another goroutine (an alert) — keeps its place in the byte
// stream.
func (c *ClientConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.batch != nil {
		*c.batch = append(*c.batch, p...)
		c.mu.Unlock()
		return len(p), nil
	}
	c.mu.Unlock()
	return c.sockWrite(p)
}

// WriteBatched writes p through tw, the tls.Conn over c, sending the
// records of each BatchMax of p with one Write on the socket. On an error
// it reports only the plaintext of batches that left whole; the
// connection is not usable after it.
func (c *ClientConn) WriteBatched(tw io.Writer, p []byte) (int, error) {
	bp := batchPool.Get().(*[]byte)
	defer batchPool.Put(bp)
	var total int
	for len(p) > 0 {
		chunk := p[:min(len(p), BatchMax)]
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

// BulkConn is the socket under an upstream tls.Conn. It reads into the
// caller's buffer until a read fills it (the socket holds more), then
// through a pooled large buffer until a read comes back short again, so
// an idle pooled connection holds no large buffer.
type BulkConn struct {
	net.Conn
	big  *[]byte // non-nil while bytes stream
	r, w int     // unread bytes of big
	keep bool    // the last refill was large: keep big for the next
	err  error   // the refill's error, after its bytes

	// A request and its answer: the next Read sends the request (send)
	// once it waits for the socket, then waits for the answer without
	// first trying a read that could only fail (no answer can precede
	// the request); sendErr is what sending returned.
	raw     *Socket // nil when the socket gives no raw access
	armed   bool
	send    func() error
	sendErr error
	doSend  func() error // c.sendNow, made once
}

// SendsWithRead reports whether SendWithRead sends from inside the read
// (the socket gives raw access); otherwise the caller sends first.
func (c *BulkConn) SendsWithRead() bool { return c.raw != nil }

// SendErr is what the last armed send returned.
func (c *BulkConn) SendErr() error { return c.sendErr }

func (c *BulkConn) sendNow() error {
	c.sendErr = c.send()
	return c.sendErr
}

// NewBulkConn wraps the socket under an upstream tls.Conn.
func NewBulkConn(c net.Conn) *BulkConn {
	b := &BulkConn{Conn: c}
	if tc, ok := c.(*net.TCPConn); ok {
		b.raw = NewSocket(tc)
	}
	b.doSend = b.sendNow
	return b
}

// SendWithRead arms the next Read to call send first (see BulkConn).
func (c *BulkConn) SendWithRead(send func() error) {
	c.armed, c.send, c.sendErr = true, send, nil
}

// Disarm reports whether an armed send never ran, and forgets it.
func (c *BulkConn) Disarm() bool {
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
func (c *BulkConn) readAfterSend(p []byte) (int, error) {
	c.armed = false
	if c.raw == nil || len(p) == 0 {
		if c.sendErr = c.send(); c.sendErr != nil {
			return 0, c.sendErr
		}
		return c.Read(p)
	}
	n, err := c.raw.ReadAfter(p, c.doSend)
	if err != nil {
		return 0, err
	}
	if n == len(p) {
		c.big = bulkPool.Get().(*[]byte)
	}
	return n, nil
}

// sockRead and Write use the socket's raw I/O when it has it.
func (c *BulkConn) sockRead(p []byte) (int, error) {
	if c.raw != nil {
		return c.raw.Read(p)
	}
	return c.Conn.Read(p)
}

func (c *BulkConn) Write(p []byte) (int, error) {
	if c.raw != nil {
		return c.raw.Write(p)
	}
	return c.Conn.Write(p)
}

const bulkBuf = 128 << 10

var bulkPool = sync.Pool{New: func() any { b := make([]byte, bulkBuf); return &b }}

func (c *BulkConn) Read(p []byte) (int, error) {
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

// Buffered is how many bytes were read from the socket and not consumed.
func (c *BulkConn) Buffered() int { return c.w - c.r }

// Idle gives the large buffer back before the connection waits in the
// pool; it reports whether every byte read from the socket was consumed
// (a connection with bytes after its response must not be reused).
func (c *BulkConn) Idle() bool {
	if c.r < c.w || c.err != nil {
		return false
	}
	c.release()
	return true
}

func (c *BulkConn) release() {
	if c.big != nil {
		bulkPool.Put(c.big)
		c.big, c.r, c.w = nil, 0, 0
	}
}

// CloseWrite half-closes when the underlying connection can.
func (c *BulkConn) CloseWrite() error {
	return CloseWrite(c.Conn)
}

// CloseWrite half-closes c when it can (a TCP connection, or a wrapper
// with CloseWrite); otherwise it does nothing.
func CloseWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
