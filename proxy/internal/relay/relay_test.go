package relay

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"airlock/proxy/internal/nettest"
)

// adopt starts a tunnel client ⇄ (relay) ⇄ server and returns its ends.
func adopt(t *testing.T, g *Gate, pre [][]byte, idle time.Duration) (client, server *net.TCPConn, up, down *atomic.Int64, done <-chan End) {
	t.Helper()
	client, pc := nettest.TCPPair(t)
	pu, server := nettest.TCPPair(t)
	r, err := Get()
	if err != nil {
		t.Fatal(err)
	}
	up, down = new(atomic.Int64), new(atomic.Int64)
	done, err = r.Adopt(g, pc, pu, pre, up, down, idle)
	if err != nil {
		t.Fatal(err)
	}
	return client, server, up, down, done
}

func wait(t *testing.T, done <-chan End) End {
	t.Helper()
	select {
	case e := <-done:
		return e
	case <-time.After(30 * time.Second):
		t.Fatal("the tunnel never ended")
	}
	return 0
}

// Adopt replays pre first, moves bytes both ways counting those it
// reads (not pre: its reader counted them), passes
// each half-close on, and ends with Done once both directions ended.
func TestAdoptMovesBytesAndEnds(t *testing.T) {
	var g Gate
	client, server, up, down, done := adopt(t, &g, [][]byte{[]byte("he"), []byte("llo ")}, time.Minute)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB: spliced
	go func() { client.Write([]byte("world")); client.CloseWrite() }()
	go func() { server.Write(big); server.CloseWrite() }()
	server.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(server)
	if err != nil || string(got) != "hello world" {
		t.Fatalf("server read %q, %v; want the replayed bytes, then the client's, then EOF", got, err)
	}
	client.SetReadDeadline(time.Now().Add(30 * time.Second))
	back, err := io.ReadAll(client)
	if err != nil || !bytes.Equal(back, big) {
		t.Fatalf("client read %d bytes, %v; want the %d the server sent, then EOF", len(back), err, len(big))
	}
	if e := wait(t, done); e != Done {
		t.Errorf("ended with %v, want Done", e)
	}
	if up.Load() != int64(len("world")) || down.Load() != int64(len(big)) {
		t.Errorf("counted %d up, %d down; want %d, %d", up.Load(), down.Load(), len("world"), len(big))
	}
}

// A gate closed before Adopt refuses the sockets (the caller still owns
// them); closed after, it ends the tunnel with Reset and both peers see
// the end.
func TestGateClose(t *testing.T) {
	var shut Gate
	shut.Close()
	_, pc := nettest.TCPPair(t)
	pu, _ := nettest.TCPPair(t)
	r, err := Get()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Adopt(&shut, pc, pu, nil, new(atomic.Int64), new(atomic.Int64), time.Minute); !errors.Is(err, errGateClosed) {
		t.Fatalf("Adopt behind a closed gate: %v, want errGateClosed", err)
	}
	var g Gate
	client, server, _, _, done := adopt(t, &g, nil, time.Minute)
	g.Close()
	if e := wait(t, done); e != Reset {
		t.Errorf("ended with %v, want Reset", e)
	}
	for _, c := range []*net.TCPConn{client, server} {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || nettest.IsTimeout(err) {
			t.Errorf("a peer of the closed tunnel: %v, want its end", err)
		}
	}
}

// A tunnel where nothing moves for the idle time ends with Idle.
func TestIdleTunnelEnds(t *testing.T) {
	var g Gate
	_, _, _, _, done := adopt(t, &g, nil, 200*time.Millisecond)
	if e := wait(t, done); e != Idle {
		t.Errorf("ended with %v, want Idle", e)
	}
}
