package rawio

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"airlock/proxy/internal/nettest"
)

// writeCounter counts the writes that reach the socket.
type writeCounter struct {
	net.Conn
	n atomic.Int64
}

func (c *writeCounter) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}

// tlsPair is a TLS connection over loopback: the server side over
// wrap(its socket), the client side plain.
func tlsPair(t *testing.T, wrapServer func(net.Conn) net.Conn, wrapClient func(net.Conn) net.Conn) (*tls.Conn, *tls.Conn) {
	t.Helper()
	_, caCert, caKey, _ := nettest.CA(t, "batch test CA")
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	leaf := nettest.Leaf(t, caCert, caKey, []string{"batch.example.test"})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); sc.Close() })
	deadline := time.Now().Add(30 * time.Second)
	cc.SetDeadline(deadline)
	sc.SetDeadline(deadline)
	stc := tls.Server(wrapServer(sc), &tls.Config{Certificates: []tls.Certificate{leaf},
		DynamicRecordSizingDisabled: true, SessionTicketsDisabled: true})
	ctc := tls.Client(wrapClient(cc), &tls.Config{ServerName: "batch.example.test", RootCAs: roots})
	errc := make(chan error, 1)
	go func() { errc <- ctc.Handshake() }()
	if err := stc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return stc, ctc
}

func same(c net.Conn) net.Conn { return c }

// TestBatchedRecordsOneSocketWrite: the records of a large write leave in
// one socket write per batch, intact and in order; a small write and the
// closing alert pass straight through, after them.
func TestBatchedRecordsOneSocketWrite(t *testing.T) {
	var wc *writeCounter
	var lc *ClientConn
	stc, ctc := tlsPair(t, func(c net.Conn) net.Conn {
		wc = &writeCounter{Conn: c}
		lc = &ClientConn{Conn: wc}
		return lc
	}, same)
	big := make([]byte, 3*BatchMax+5000) // four batches, the last partial
	rand.Read(big)
	small := []byte("small response")
	got := make(chan []byte, 1)
	go func() {
		b, err := io.ReadAll(ctc) // until the server's close_notify
		if err != nil {
			t.Errorf("client read: %v", err)
		}
		got <- b
	}()
	before := wc.n.Load()
	n, err := lc.WriteBatched(stc, big)
	if err != nil || n != len(big) {
		t.Fatalf("WriteBatched = %d, %v; want %d, nil", n, err, len(big))
	}
	if w := wc.n.Load() - before; w != 4 {
		t.Errorf("a %d-byte write took %d socket writes, want 4 (one per batch of %d)", len(big), w, BatchMax)
	}
	before = wc.n.Load()
	if _, err := stc.Write(small); err != nil {
		t.Fatal(err)
	}
	if w := wc.n.Load() - before; w != 1 {
		t.Errorf("a small write outside a batch took %d socket writes, want 1", w)
	}
	if err := stc.Close(); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, append(big, small...)) {
		t.Fatalf("client got %d bytes, want the %d bytes written, in order", len(b), len(big)+len(small))
	}
}

// readCounter counts the reads that reach the socket.
type readCounter struct {
	net.Conn
	n atomic.Int64
}

func (c *readCounter) Read(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Read(p)
}

// captureConn diverts writes into buf once it is set.
type captureConn struct {
	net.Conn
	buf *bytes.Buffer
}

func (c *captureConn) Write(p []byte) (int, error) {
	if c.buf != nil {
		return c.buf.Write(p)
	}
	return c.Conn.Write(p)
}

// sourceConn reads from src once it is set.
type sourceConn struct {
	net.Conn
	src io.Reader
}

func (c *sourceConn) Read(p []byte) (int, error) {
	if c.src != nil {
		return c.src.Read(p)
	}
	return c.Conn.Read(p)
}

// TestBulkConnReadsInLargePieces: under a TLS client, a stream that
// waits whole (as a busy upstream's does) is read in pieces far larger
// than a record, byte for byte, and the large buffer goes back once the
// stream is consumed.
func TestBulkConnReadsInLargePieces(t *testing.T) {
	var capture *captureConn
	var src *sourceConn
	var rc *readCounter
	var bc *BulkConn
	stc, ctc := tlsPair(t, func(c net.Conn) net.Conn {
		capture = &captureConn{Conn: c}
		return capture
	}, func(c net.Conn) net.Conn {
		src = &sourceConn{Conn: c}
		rc = &readCounter{Conn: src}
		bc = &BulkConn{Conn: rc}
		return bc
	})
	// The handshake is over and nothing is in flight (no session
	// tickets): the server's records now go to a buffer the client then
	// reads as its socket, all of it waiting.
	capture.buf = new(bytes.Buffer)
	body := nettest.RandomBody()[:512<<10] // 32 full records
	if _, err := stc.Write(body); err != nil {
		t.Fatal(err)
	}
	src.src = bytes.NewReader(capture.buf.Bytes())
	before := rc.n.Load()
	got := make([]byte, len(body))
	if _, err := io.ReadFull(ctc, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, body) {
		t.Fatal("the stream read through BulkConn differs from the one written")
	}
	if reads := rc.n.Load() - before; reads > 8 {
		t.Errorf("32 records waiting took %d socket reads, want at most 8 (pieces of %d bytes)", reads, bulkBuf)
	}
	if !bc.Idle() || bc.big != nil {
		t.Error("after the whole stream was consumed, the connection is not idle or holds its large buffer")
	}
}

// TestBulkConnIdle: a connection with bytes read from the socket but not
// consumed is not idle (it must not be reused); once consumed, it is,
// and holds no large buffer.
func TestBulkConnIdle(t *testing.T) {
	data := nettest.RandomBody()[:300<<10]
	bc := &BulkConn{Conn: &sourceConn{src: bytes.NewReader(data)}}
	p := make([]byte, 1000)
	var got []byte
	for range 2 { // the first read fills p (more waits), the second refills
		n, err := bc.Read(p)
		if err != nil || n != len(p) {
			t.Fatalf("Read = %d, %v; want %d, nil", n, err, len(p))
		}
		got = append(got, p[:n]...)
	}
	if bc.big == nil {
		t.Fatal("no large buffer after a read that filled the caller's")
	}
	if bc.Idle() {
		t.Fatal("idle with bytes read from the socket and not consumed")
	}
	rest, err := io.ReadAll(bc)
	if err != nil {
		t.Fatal(err)
	}
	if got = append(got, rest...); !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes through BulkConn, not the %d written", len(got), len(data))
	}
	if !bc.Idle() || bc.big != nil {
		t.Error("after EOF: not idle, or the large buffer is still held")
	}
}
