package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"airlock/proxy/internal/nettest"
)

// Raw reads and writes move every byte, in order, through full socket
// buffers (a write that must wait for the reader), and end with EOF.
func TestRawIOMovesBytesAndEOF(t *testing.T) {
	a, b := nettest.TCPPair(t)
	ra, rb := NewSocket(a), NewSocket(b)
	if ra == nil || rb == nil {
		t.Fatal("no raw access to a TCP socket")
	}
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB: more than the socket buffers hold
	errc := make(chan error, 1)
	go func() {
		n, err := ra.Write(want)
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
		n, err := rb.Read(buf)
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
	a, _ := nettest.TCPPair(t)
	r := NewSocket(a)
	a.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := r.Read(make([]byte, 10))
	if !nettest.IsTimeout(err) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	a.Close()
	if _, err := r.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write on a closed socket: %v, want net.ErrClosed", err)
	}
}

// A read that carries a send sends first and returns the answer; a
// send that fails is returned and nothing is read.
func TestRawIOSendThenRead(t *testing.T) {
	a, b := nettest.TCPPair(t)
	r := NewSocket(a)
	go func() {
		buf := make([]byte, 4)
		if _, err := io.ReadFull(b, buf); err == nil && string(buf) == "ping" {
			b.Write([]byte("pong"))
		}
	}()
	a.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 16)
	n, err := r.ReadAfter(buf, func() error { _, err := r.Write([]byte("ping")); return err })
	if err != nil || string(buf[:n]) != "pong" {
		t.Fatalf("read after send: %q, %v", buf[:n], err)
	}
	boom := errors.New("boom")
	if _, err := r.ReadAfter(buf, func() error { return boom }); err != boom {
		t.Fatalf("failed send: %v, want it returned", err)
	}
}
