package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// latency sends queries for c1..cN.bench.test at a fixed rate (open loop:
// the schedule does not wait for answers), evenly spaced (it polls the
// clock instead of sleeping between sends, so run it on a CPU of its own),
// over several UDP sockets and prints the latency percentiles in
// microseconds. A query's latency runs
// from just before its send system call to the kernel's receive timestamp
// of its answer (SO_TIMESTAMPNS), so time the client's own receiving
// thread waits for a CPU is not counted; time the server waits for one
// is. The machine's cores are shared by client and server, and a load
// generator's scheduling delays otherwise dominate the tail (dnsperf's own
// figure is printed beside this one).
//
//	latency -addr 127.0.0.1:15354 -qps 50000 -dur 5s
func latency(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("latency", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:15354", "server")
	qps := fs.Int("qps", 10000, "queries per second")
	dur := fs.Duration("dur", 5*time.Second, "how long to send")
	clients := fs.Int("clients", 8, "UDP sockets")
	names := fs.Int("names", 1000, "distinct names c1..cN.bench.test")
	_ = fs.Parse(args)
	if *qps <= 0 || *clients <= 0 || *names <= 0 {
		return errors.New("latency: qps, clients and names must be positive")
	}
	wires := make([][]byte, *names)
	for i := range wires {
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("c%d.bench.test.", i+1), dns.TypeA)
		b, err := m.Pack()
		if err != nil {
			return err
		}
		wires[i] = b
	}
	socks := make([]*latSock, *clients)
	for i := range socks {
		s, err := newLatSock(*addr)
		if err != nil {
			return err
		}
		defer s.c.Close()
		socks[i] = s
	}
	var wg sync.WaitGroup
	for _, s := range socks {
		wg.Go(s.recv)
	}
	start := time.Now()
	interval := time.Second / time.Duration(*qps)
	total := int(*dur / interval)
	sent := 0
	for sent < total && ctx.Err() == nil {
		due := min(total, int(time.Since(start)/interval)+1)
		for ; sent < due; sent++ {
			s := socks[sent%len(socks)]
			q := wires[sent%len(wires)]
			s.send(q)
		}
		// Sleep only when the next send is far: a sleep ends up to a
		// timer tick late, and the catch-up burst would queue in the
		// server. Otherwise yield (to the receivers) and look again.
		if wait := time.Until(start.Add(time.Duration(sent) * interval)); wait > 2*time.Millisecond {
			time.Sleep(wait - time.Millisecond)
		} else {
			runtime.Gosched()
		}
	}
	elapsed := time.Since(start)
	time.Sleep(500 * time.Millisecond) // answers still on their way
	for _, s := range socks {
		_ = s.c.SetReadDeadline(time.Now())
	}
	wg.Wait()
	var lat []int64
	var lost int
	for _, s := range socks {
		lat = append(lat, s.lat...)
		lost += int(s.sent.Load()) - len(s.lat)
	}
	if len(lat) == 0 {
		fmt.Println("n=0")
		return nil
	}
	slices.Sort(lat)
	pct := func(p float64) int64 { return lat[min(len(lat)-1, int(float64(len(lat))*p))] / 1000 }
	fmt.Printf("n=%d lost=%d qps=%.0f p50=%d p90=%d p99=%d p999=%d max=%d\n",
		len(lat), lost, float64(sent)/elapsed.Seconds(), pct(0.5), pct(0.9), pct(0.99), pct(0.999), lat[len(lat)-1]/1000)
	return nil
}

// latSock is one client socket: the send time of each ID in flight, the
// latencies measured (ns).
type latSock struct {
	c      *net.UDPConn
	id     uint16
	sentAt [1 << 16]atomic.Int64
	sent   atomic.Int64
	lat    []int64
}

func newLatSock(addr string) (*latSock, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	c, err := net.DialUDP("udp", nil, ua)
	if err != nil {
		return nil, err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		c.Close()
		return nil, errors.Join(err, serr)
	}
	_ = c.SetReadBuffer(4 << 20)
	return &latSock{c: c}, nil
}

func (s *latSock) send(q []byte) {
	s.id++
	binary.BigEndian.PutUint16(q, s.id)
	s.sentAt[s.id].Store(time.Now().UnixNano())
	if _, err := s.c.Write(q); err == nil {
		s.sent.Add(1)
	}
}

func (s *latSock) recv() {
	buf := make([]byte, 1500)
	oob := make([]byte, 128)
	for {
		n, oobn, _, _, err := s.c.ReadMsgUDP(buf, oob)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if n < 12 {
			continue
		}
		at := rxTime(oob[:oobn])
		t0 := s.sentAt[binary.BigEndian.Uint16(buf)].Swap(0)
		if at == 0 || t0 == 0 {
			continue
		}
		s.lat = append(s.lat, max(0, at-t0))
	}
}

// rxTime is the kernel's receive timestamp (SCM_TIMESTAMPNS) in ns.
func rxTime(oob []byte) int64 {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})) {
			ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
			return ts.Nano()
		}
	}
	return 0
}
