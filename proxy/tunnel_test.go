package proxy

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"airlock/proxy/internal/nettest"
	"airlock/proxy/internal/relay"
)

// tunnelEnds starts a tunnel the way the proxy runs one: the client side
// wrapped in the byte counter and the sniffer's replay, the upstream a
// plain TCP socket. It returns the client's and the server's ends and the
// tunnel's close reason.
func tunnelEnds(t testing.TB, sniffed []byte, idle time.Duration) (client, server *net.TCPConn, f *flow, reason chan closeReason) {
	client, pc := tcpPair(t)
	pu, server := tcpPair(t)
	f = &flow{}
	f.up.Add(int64(len(sniffed))) // the sniffer counted what it read
	cc := newPrefixConn(&countConn{Conn: pc, f: f}, bytes.Clone(sniffed))
	reason = make(chan closeReason, 1)
	go func() { reason <- tunnel(f, cc, pu, idle) }()
	return client, server, f, reason
}

func randBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// The sniffed bytes reach the server first, whether the relay sends them
// (up to one buffer) or the tunnel writes them before it starts (more).
func TestTunnelReplaysSniffedBytesCountsAndHalfCloses(t *testing.T) {
	for _, sniffed := range [][]byte{[]byte("hello"), randBytes(t, relay.BufSize), randBytes(t, relay.BufSize+1)} {
		t.Run(fmt.Sprint(len(sniffed)), func(t *testing.T) { testTunnelReplays(t, sniffed) })
	}
}

func testTunnelReplays(t *testing.T, sniffed []byte) {
	client, server, f, reason := tunnelEnds(t, sniffed, time.Minute)
	upData := randBytes(t, 3<<20+17)
	downData := randBytes(t, 5<<20+3)
	var wg sync.WaitGroup
	var gotUp []byte
	var upErr error
	wg.Go(func() {
		// The server reads to the client's half-close, then answers: the
		// tunnel passed the half-close on without closing the other way.
		gotUp, upErr = io.ReadAll(server)
		server.Write(downData)
		server.CloseWrite()
	})
	if _, err := client.Write(upData); err != nil {
		t.Fatal(err)
	}
	client.CloseWrite()
	gotDown, err := io.ReadAll(client)
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if upErr != nil {
		t.Fatal(upErr)
	}
	if want := append(bytes.Clone(sniffed), upData...); !bytes.Equal(gotUp, want) {
		t.Fatalf("server got %d bytes, want the sniffed bytes then %d bytes", len(gotUp), len(upData))
	}
	if !bytes.Equal(gotDown, downData) {
		t.Fatalf("client got %d bytes, want %d", len(gotDown), len(downData))
	}
	if r := <-reason; r != "done" {
		t.Errorf("close reason %q, want done", r)
	}
	if got, want := f.up.Load(), int64(len(sniffed)+len(upData)); got != want {
		t.Errorf("bytes up %d, want %d", got, want)
	}
	if got, want := f.down.Load(), int64(len(downData)); got != want {
		t.Errorf("bytes down %d, want %d", got, want)
	}
}

func TestTunnelSmallMessagesBothWays(t *testing.T) {
	client, server, f, reason := tunnelEnds(t, nil, time.Minute)
	buf := make([]byte, 64)
	for i := range 50 {
		msg := bytes.Repeat([]byte{byte(i)}, 1+i)
		client.Write(msg)
		if _, err := io.ReadFull(server, buf[:len(msg)]); err != nil || !bytes.Equal(buf[:len(msg)], msg) {
			t.Fatalf("message %d up: %v", i, err)
		}
		server.Write(msg)
		if _, err := io.ReadFull(client, buf[:len(msg)]); err != nil || !bytes.Equal(buf[:len(msg)], msg) {
			t.Fatalf("message %d down: %v", i, err)
		}
	}
	client.Close()
	server.Close()
	if r := <-reason; r != "done" && r != "reset" {
		t.Errorf("close reason %q", r)
	}
	if want := int64(50 * 51 / 2); f.up.Load() != want || f.down.Load() != want {
		t.Errorf("bytes up %d down %d, want %d each", f.up.Load(), f.down.Load(), want)
	}
}

func TestTunnelIdleTimeout(t *testing.T) {
	_, _, _, reason := tunnelEnds(t, nil, 200*time.Millisecond)
	select {
	case r := <-reason:
		if r != "idle-timeout" {
			t.Errorf("close reason %q, want idle-timeout", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("an idle tunnel was never closed")
	}
}

// A download while the client sends nothing is not idle.
func TestTunnelOneWayStreamIsNotIdle(t *testing.T) {
	client, server, f, reason := tunnelEnds(t, nil, 500*time.Millisecond)
	go func() {
		for range 40 { // about 2 s, four times the idle timeout
			if _, err := server.Write([]byte("tick\n")); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		server.Close()
	}()
	got, _ := io.ReadAll(client)
	if len(got) != 40*5 {
		t.Errorf("client got %d bytes, want %d: the tunnel closed a busy download as idle", len(got), 40*5)
	}
	client.Close()
	if r := <-reason; r == "idle-timeout" {
		t.Errorf("close reason %q", r)
	}
	if f.down.Load() != 200 {
		t.Errorf("bytes down %d, want 200", f.down.Load())
	}
}

func openFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// Idle spliced tunnels hold their sockets and nothing else: no splice
// pipe waits with them.
func TestTunnelIdleHoldsNoPipes(t *testing.T) {
	const n = 20
	before := openFDs(t)
	var ends []*net.TCPConn
	for range n {
		client, server, _, _ := tunnelEnds(t, nil, time.Minute)
		data := randBytes(t, 1<<20)
		go server.Write(data)
		got := make([]byte, len(data))
		if _, err := io.ReadFull(client, got); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, client, server)
	}
	time.Sleep(100 * time.Millisecond) // let each direction go back to its read
	// Four sockets per tunnel (two ends, two proxy sides) and a few pooled
	// pipes at most; a pipe held per waiting direction would add 4 per tunnel.
	if got, limit := openFDs(t)-before, 4*n+8; got > limit {
		t.Errorf("%d tunnels hold %d descriptors, want at most %d", n, got, limit)
	}
	_ = ends
}

// BenchmarkTunnel1MiB moves 1 MiB per op from a server through a tunnel
// to a client, with splice (tunnel) and with the user-space copy (pipe),
// reporting process CPU time per MiB. Both ends are in this process too:
// "direct" (no tunnel) measures their share.
func BenchmarkTunnel1MiB(b *testing.B) {
	for _, mode := range []string{"direct", "splice", "userspace"} {
		b.Run(mode, func(b *testing.B) {
			client, pc := tcpPair(b)
			pu, server := tcpPair(b)
			if mode == "direct" {
				server = pc
			}
			f := &flow{}
			go func() {
				if mode == "direct" {
					return
				}
				if mode == "splice" {
					tunnel(f, &countConn{Conn: pc, f: f}, pu, time.Minute)
				} else {
					pipe(&countConn{Conn: pc, f: f}, pu, time.Minute)
				}
			}()
			streamMiBs(b, server, client)
		})
	}
}

// streamMiBs has server send 1 MiB chunks for as long as it can while the
// benchmark reads b.N of them at client, and reports the process's CPU
// time per MiB.
func streamMiBs(b *testing.B, server, client net.Conn) {
	chunk := randBytes(b, 1<<20)
	go func() {
		for {
			if _, err := server.Write(chunk); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 1<<20)
	b.SetBytes(1 << 20)
	b.ResetTimer()
	cpu0 := cpuTime()
	for range b.N {
		if _, err := io.ReadFull(client, buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/MiB")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTunnelRoundTrip is one small request and answer (a keep-alive
// exchange) through a tunnel (splice), the user-space copy (userspace),
// and none (direct), on 1 and on 32 connections at once, with process CPU
// time per round trip.
func BenchmarkTunnelRoundTrip(b *testing.B) {
	for _, conns := range []int{1, 32} {
		for _, mode := range []string{"direct", "splice", "userspace"} {
			b.Run(fmt.Sprintf("c=%d/%s", conns, mode), func(b *testing.B) {
				roundTrips := func(c *net.TCPConn, next func() bool) {
					msg := make([]byte, 200)
					for next() {
						c.Write(msg)
						if _, err := io.ReadFull(c, msg); err != nil {
							b.Error(err)
							return
						}
					}
				}
				if conns == 1 {
					c := echoThrough(b, mode)
					b.ResetTimer()
					cpu0 := cpuTime()
					i := 0
					roundTrips(c, func() bool { i++; return i <= b.N })
					b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
					return
				}
				// RunParallel starts parallelism × GOMAXPROCS goroutines,
				// each with its own connection.
				par := max(1, conns/runtime.GOMAXPROCS(0))
				clients := make(chan *net.TCPConn, par*runtime.GOMAXPROCS(0))
				for range cap(clients) {
					clients <- echoThrough(b, mode)
				}
				b.SetParallelism(par)
				b.ResetTimer()
				cpu0 := cpuTime()
				b.RunParallel(func(pb *testing.PB) { roundTrips(<-clients, pb.Next) })
				b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			})
		}
	}
}

// echoThrough returns a client connected to a 200-byte echo server through
// a tunnel of the given mode.
func echoThrough(b *testing.B, mode string) *net.TCPConn {
	client, pc := tcpPair(b)
	pu, server := tcpPair(b)
	if mode == "direct" {
		server = pc
	} else {
		f := &flow{}
		cc := &countConn{Conn: pc, f: f}
		if mode == "splice" {
			go tunnel(f, cc, pu, time.Minute)
		} else {
			go pipe(cc, pu, time.Minute)
		}
	}
	go func() {
		buf := make([]byte, 200)
		for {
			if _, err := io.ReadFull(server, buf); err != nil {
				return
			}
			if _, err := server.Write(buf); err != nil {
				return
			}
		}
	}()
	return client
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

// tcpPair is nettest.TCPPair.
var tcpPair = nettest.TCPPair
