package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// latency sends queries for c1..cN.bench.test at a fixed rate (open loop:
// the schedule does not wait for answers), evenly spaced, over several UDP
// sockets and prints the latency percentiles in microseconds. It never
// sleeps: one loop sends what is due and polls the sockets for answers
// without blocking (so run it on a CPU of its own). A query's latency runs
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
		for _, s := range socks {
			s.poll()
		}
	}
	elapsed := time.Since(start)
	for end := time.Now().Add(lostWait); time.Now().Before(end); { // answers still on their way
		for _, s := range socks {
			s.poll()
		}
	}
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
	answered := len(lat)
	// A query never answered counts in the percentiles with a latency of
	// lostWait, the least any such query waited, so losing queries never
	// makes a server look faster.
	for range max(lost, 0) {
		lat = append(lat, int64(lostWait))
	}
	slices.Sort(lat)
	pct := func(p float64) int64 { return lat[min(len(lat)-1, int(float64(len(lat))*p))] / 1000 }
	fmt.Printf("n=%d lost=%d qps=%.0f p50=%d p90=%d p99=%d p999=%d max=%d\n",
		answered, lost, float64(sent)/elapsed.Seconds(), pct(0.5), pct(0.9), pct(0.99), pct(0.999), lat[len(lat)-1]/1000)
	return nil
}

// lostWait is how long answers are awaited after the last send; a query
// still unanswered then is lost.
const lostWait = 500 * time.Millisecond

// latSock is one client socket: the send time of each ID in flight, the
// latencies measured (ns).
type latSock struct {
	c      *net.UDPConn
	fd     int // c's, polled directly
	buf    [1500]byte
	oob    [128]byte
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
	s := &latSock{c: c}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		s.fd = int(fd)
		serr = unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		c.Close()
		return nil, errors.Join(err, serr)
	}
	_ = c.SetReadBuffer(4 << 20)
	return s, nil
}

func (s *latSock) send(q []byte) {
	s.id++
	binary.BigEndian.PutUint16(q, s.id)
	s.sentAt[s.id].Store(time.Now().UnixNano())
	if _, err := s.c.Write(q); err == nil {
		s.sent.Add(1)
	}
}

// poll reads the answers waiting on the socket without blocking: the
// client never sleeps in a read, so a server's answer never has to wake it.
func (s *latSock) poll() {
	for {
		n, oobn, _, _, err := unix.Recvmsg(s.fd, s.buf[:], s.oob[:], unix.MSG_DONTWAIT)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return // EAGAIN: nothing more for now
		}
		if n < 12 {
			continue
		}
		at := rxTime(s.oob[:oobn])
		t0 := s.sentAt[binary.BigEndian.Uint16(s.buf[:])].Swap(0)
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
