package proxy

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// A client that stops reading fills its tunnel's queues; the relays keep
// every other tunnel moving, and once the client reads again it gets every
// byte in order, whether the tunnel held them back from small reads or
// from splices.
func TestTunnelClientThatNeverReadsStallsNoOther(t *testing.T) {
	slow, slowServer, f, slowReason := tunnelEnds(t, nil, time.Minute)
	data := randBytes(t, 16<<20)
	sent := make(chan error, 1)
	go func() {
		// Writes of mixed sizes: small ones are read into the relay's
		// buffer, a full one switches the direction to splice.
		rng := rand.New(rand.NewPCG(1, 2))
		rest := data
		for len(rest) > 0 {
			k := min(len(rest), 1+rng.IntN(64<<10))
			if _, err := slowServer.Write(rest[:k]); err != nil {
				sent <- err
				return
			}
			rest = rest[k:]
		}
		sent <- slowServer.CloseWrite()
	}()
	// Wait until the slow client's queues are full: the server's writes
	// stop moving.
	deadline := time.Now().Add(30 * time.Second)
	var last int64 = -1
	for {
		time.Sleep(50 * time.Millisecond)
		n := f.down.Load()
		if n == last && n > 0 {
			break
		}
		last = n
		if time.Now().After(deadline) {
			t.Fatal("the slow client's tunnel never filled")
		}
	}
	if f.down.Load() >= int64(len(data)) {
		t.Fatalf("all %d bytes moved with nobody reading: the test filled no queue", len(data))
	}

	// Other tunnels (on every relay) still exchange messages.
	var wg sync.WaitGroup
	for i := range 8 {
		client, server, _, _ := tunnelEnds(t, nil, time.Minute)
		wg.Go(func() {
			buf := make([]byte, 100)
			for j := range 20 {
				msg := bytes.Repeat([]byte{byte(i*20 + j)}, 100)
				client.SetDeadline(time.Now().Add(30 * time.Second))
				server.SetDeadline(time.Now().Add(30 * time.Second))
				if _, err := client.Write(msg); err != nil {
					t.Error(err)
					return
				}
				if _, err := io.ReadFull(server, buf); err != nil || !bytes.Equal(buf, msg) {
					t.Errorf("tunnel %d message %d up: %v", i, j, err)
					return
				}
				if _, err := server.Write(msg); err != nil {
					t.Error(err)
					return
				}
				if _, err := io.ReadFull(client, buf); err != nil || !bytes.Equal(buf, msg) {
					t.Errorf("tunnel %d message %d down: %v", i, j, err)
					return
				}
			}
		})
	}
	wg.Wait()

	slow.SetReadDeadline(time.Now().Add(60 * time.Second))
	got, err := io.ReadAll(slow)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("the slow client got %d bytes, not the %d sent in order", len(got), len(data))
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	slow.CloseWrite()
	if r := <-slowReason; r != "done" {
		t.Errorf("close reason %q, want done", r)
	}
	if got := f.down.Load(); got != int64(len(data)) {
		t.Errorf("bytes down %d, want %d", got, len(data))
	}
}

// A tunnel ended from outside (a policy reload, the proxy shutting down:
// both go through the flow's gate) ends with both peers seeing their
// connection end, and the relay never touches those descriptors again:
// new tunnels, which may get the same descriptor numbers, work.
func TestTunnelClosedUnderItEnds(t *testing.T) {
	client, pc := tcpPair(t)
	pu, server := tcpPair(t)
	f := &flow{}
	reason := make(chan closeReason, 1)
	go func() { reason <- tunnel(f, &countConn{Conn: pc, f: f}, pu, time.Minute) }()
	client.Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(server, buf); err != nil {
		t.Fatal(err)
	}
	f.gate.Close()
	select {
	case r := <-reason:
		if r != "reset" {
			t.Errorf("close reason %q, want reset", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a tunnel closed from outside never ended")
	}
	for _, c := range []*net.TCPConn{client, server} {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Read(buf); err == nil {
			t.Fatal("a peer of the closed tunnel read bytes")
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("a peer of the closed tunnel still sees it open")
		}
	}
	for range 4 {
		c, s, _, _ := tunnelEnds(t, nil, time.Minute)
		c.Write([]byte("pong"))
		s.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "pong" {
			t.Fatalf("a new tunnel after the closed one: %q, %v", buf, err)
		}
	}
}

// A tunnel whose gate was closed before it started (Redecide racing the
// dial) never relays a byte: its sockets are closed at once.
func TestTunnelGateClosedBeforeStart(t *testing.T) {
	client, pc := tcpPair(t)
	pu, server := tcpPair(t)
	f := &flow{}
	f.gate.Close()
	client.Write([]byte("ping"))
	if r := tunnel(f, &countConn{Conn: pc, f: f}, pu, time.Minute); r != "reset" {
		t.Errorf("close reason %q, want reset", r)
	}
	server.SetReadDeadline(time.Now().Add(30 * time.Second))
	if b, err := io.ReadAll(server); len(b) > 0 || err != nil {
		t.Errorf("the server got %q, %v; want the end and no bytes", b, err)
	}
}

// A reset on one side closes the other (fail closed).
func TestTunnelResetClosesBothSides(t *testing.T) {
	client, server, _, reason := tunnelEnds(t, nil, time.Minute)
	client.Write([]byte("x"))
	buf := make([]byte, 1)
	if _, err := io.ReadFull(server, buf); err != nil {
		t.Fatal(err)
	}
	client.SetLinger(0) // its close sends a reset
	client.Close()
	server.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := server.Read(buf); err == nil {
		t.Fatal("the server side stayed open after the client reset")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the server side stayed open after the client reset")
	}
	if r := <-reason; r != "reset" {
		t.Errorf("close reason %q, want reset", r)
	}
}

// Bytes and the end of the stream that arrive together are both passed
// on: a read that returns the bytes short of the buffer has not yet seen
// the end, which gets no readiness edge of its own.
func TestTunnelPassesBytesAndEndThatArriveTogether(t *testing.T) {
	for i := range 5 {
		client, pc := tcpPair(t)
		pu, server := tcpPair(t)
		msg := bytes.Repeat([]byte{byte('a' + i)}, 100+i)
		// Both are queued at the proxy's upstream socket before the
		// tunnel starts.
		server.Write(msg)
		server.CloseWrite()
		time.Sleep(10 * time.Millisecond)
		f := &flow{}
		reason := make(chan closeReason, 1)
		go func() { reason <- tunnel(f, &countConn{Conn: pc, f: f}, pu, time.Minute) }()
		client.SetReadDeadline(time.Now().Add(30 * time.Second))
		got, err := io.ReadAll(client)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("client got %q, %v; want %q then the end", got, err, msg)
		}
		client.CloseWrite()
		if r := <-reason; r != "done" {
			t.Errorf("close reason %q, want done", r)
		}
	}
}
