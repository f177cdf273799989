package dnsd

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// The UDP benchmarks drive the real path — SO_REUSEPORT sockets, batched
// reads and writes, the chain, the event — from a client in the same
// process that keeps udpWindow queries in flight. Besides wall time per
// query they report cpu-ns/op: the process's user+system CPU time per
// query (client and, for forwarding, the test upstream included), which is
// what decides throughput on a machine whose cores are all busy. Compare
// runs with -count and benchstat; allocs/op counts the client too (it
// allocates nothing).
//
//	go test ./dnsd -run XXX -bench UDP -benchtime 200000x -cpuprofile cpu.out

const udpWindow = 64

func BenchmarkUDPCached(b *testing.B) {
	benchUDP(b, "www.example.test.", false)
}

func BenchmarkUDPDenied(b *testing.B) {
	benchUDP(b, "www.denied.test.", false)
}

// BenchmarkUDPForwarded asks a new name every query: each one misses the
// cache and is forwarded to a loopback upstream that answers at once.
func BenchmarkUDPForwarded(b *testing.B) {
	benchUDP(b, "u00000000.example.test.", true)
}

func benchUDP(b *testing.B, name string, unique bool) {
	up := startBenchUpstream(b)
	p := webPolicy(b, "", "")
	s, err := New(Config{Listen: []string{"127.0.0.1:0"}, Identifier: oneSandbox(p, false), Emitter: &countEmitter{},
		Upstreams: []Upstream{{Addr: up}}, BindingsGrace: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	udp, _ := s.Addrs()
	c, err := net.Dial("udp", udp[0].String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	q, _ := m.Pack()
	send := func(i int) {
		binary.BigEndian.PutUint16(q, uint16(i))
		if unique { // the 8 digits after the first label's length and "u"
			n := uint32(i)
			for d := 9; d >= 2; d-- {
				q[12+d] = byte('0' + n%10)
				n /= 10
			}
		}
		_, _ = c.Write(q)
	}
	buf := make([]byte, 1500)
	recv := func() bool {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := c.Read(buf)
		return err == nil
	}
	// Warm: the cached name is cached, the sockets and goroutines exist.
	send(0)
	if !recv() {
		b.Fatal("no answer")
	}
	lost := 0
	var ru0, ru1 syscall.Rusage
	b.ReportAllocs()
	b.ResetTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	sent, got := 0, 0
	for got+lost < b.N {
		for sent-got-lost < udpWindow && sent < b.N {
			sent++
			send(sent)
		}
		if !recv() {
			lost += sent - got - lost
		} else {
			got++
		}
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	b.StopTimer()
	cpu := time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano() + ru1.Stime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if lost > b.N/100 {
		b.Errorf("%d of %d queries lost", lost, b.N)
	}
}

// startBenchUpstream answers every query with one A record (TTL 3600), built
// in place from the query without allocating.
func startBenchUpstream(b *testing.B) string {
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pc.Close() })
	rr := []byte{0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 1, 2, 3, 4}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil || n < 12 {
				continue
			}
			off, err := skipName(buf[:n], 12)
			if err != nil || off+4 > n {
				continue
			}
			off += 4
			buf[2] |= 0x84                          // QR, AA
			binary.BigEndian.PutUint16(buf[6:], 1)  // ANCOUNT
			binary.BigEndian.PutUint16(buf[8:], 0)  // NSCOUNT
			binary.BigEndian.PutUint16(buf[10:], 0) // ARCOUNT: the OPT is dropped
			out := append(buf[:off], rr...)
			_, _ = pc.WriteToUDPAddrPort(out, from)
		}
	}()
	return pc.LocalAddr().String()
}
