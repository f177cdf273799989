package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// Raw reads and writes move every byte, in order, through full socket
// buffers (a write that must wait for the reader), and end with EOF.
func TestRawIOMovesBytesAndEOF(t *testing.T) {
	a, b := tcpPair(t)
	ra, rb := newRawIO(a), newRawIO(b)
	if ra == nil || rb == nil {
		t.Fatal("no raw access to a TCP socket")
	}
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB: more than the socket buffers hold
	errc := make(chan error, 1)
	go func() {
		n, err := ra.write(want)
		if err == nil && n != len(want) {
			err = io.ErrShortWrite
		}
		a.CloseWrite()
		errc <- err
	}()
	b.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got []byte
	buf := make([]byte, 7000)
	for {
		n, err := rb.read(buf, nil)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want %d, equal prefix: %v", len(got), len(want), bytes.HasPrefix(want, got))
	}
}

// A raw read honours the read deadline with a timeout error (idle
// connections are closed by it), and a closed socket reports net.ErrClosed.
func TestRawIODeadlineAndClose(t *testing.T) {
	a, _ := tcpPair(t)
	r := newRawIO(a)
	a.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := r.read(make([]byte, 10), nil)
	if !isTimeout(err) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	a.Close()
	if _, err := r.write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write on a closed socket: %v, want net.ErrClosed", err)
	}
}

// A read that carries a send sends first and returns the answer; a
// send that fails is returned and nothing is read.
func TestRawIOSendThenRead(t *testing.T) {
	a, b := tcpPair(t)
	r := newRawIO(a)
	go func() {
		buf := make([]byte, 4)
		if _, err := io.ReadFull(b, buf); err == nil && string(buf) == "ping" {
			b.Write([]byte("pong"))
		}
	}()
	a.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 16)
	n, err := r.read(buf, func() error { _, err := r.write([]byte("ping")); return err })
	if err != nil || string(buf[:n]) != "pong" {
		t.Fatalf("read after send: %q, %v", buf[:n], err)
	}
	boom := errors.New("boom")
	if _, err := r.read(buf, func() error { return boom }); err != boom {
		t.Fatalf("failed send: %v, want it returned", err)
	}
}

// rawUnder goes raw only under wrappers that no longer change bytes.
func TestRawUnder(t *testing.T) {
	a, _ := tcpPair(t)
	f := &flow{}
	if tc, ff, ok := rawUnder(&countConn{Conn: &prefixConn{Conn: a}, f: f}); !ok || tc != a || ff != f {
		t.Fatalf("drained prefix under a counter: %v %v %v", tc, ff, ok)
	}
	if _, _, ok := rawUnder(&countConn{Conn: &prefixConn{Conn: a, pre: []byte("x")}, f: f}); ok {
		t.Fatal("went raw with replay bytes left")
	}
	if _, _, ok := rawUnder(&bufConn{Conn: a}); ok {
		t.Fatal("went raw under an unknown wrapper")
	}
}
