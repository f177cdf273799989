package udpio

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// aligned copies b into storage aligned for a control message header, as
// the kernel's control buffers are.
func aligned(b []byte) []byte {
	w := make([]uint64, (len(b)+7)/8+1)
	out := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), len(w)*8)[:len(b)]
	copy(out, b)
	return out
}

// FuzzPktinfo: any control buffer gives an address or none, never a
// panic, and a well-formed IP_PKTINFO message behind other messages is
// found.
func FuzzPktinfo(f *testing.F) {
	var b [PktinfoLen]byte
	f.Add(SourceOOB(&b, netip.MustParseAddr("198.18.0.1")))
	f.Add([]byte{})
	f.Add(make([]byte, unix.SizeofCmsghdr+1))
	f.Fuzz(func(t *testing.T, oob []byte) {
		got := Pktinfo(aligned(oob))
		if got.IsValid() && !got.Is4() {
			t.Fatalf("Pktinfo %v: not IPv4", got)
		}
		if len(oob) > 256 {
			return
		}
		// Behind whatever came first, a real IP_PKTINFO is read.
		var msg [unix.SizeofCmsghdr + unix.SizeofInet4Pktinfo]byte
		h := (*unix.Cmsghdr)(unsafe.Pointer(&msg[0]))
		h.Level, h.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
		h.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
		copy(msg[unix.SizeofCmsghdr+8:], []byte{198, 18, 7, 9})
		other := make([]byte, unix.CmsgSpace(len(oob)))
		hdr := unix.Cmsghdr{Level: unix.SOL_SOCKET, Type: unix.SCM_RIGHTS + 100}
		hdr.SetLen(unix.CmsgLen(len(oob)))
		copy(other, unsafe.Slice((*byte)(unsafe.Pointer(&hdr)), unix.SizeofCmsghdr))
		copy(other[unix.SizeofCmsghdr:], oob)
		both := aligned(append(other, msg[:]...))
		if got := Pktinfo(both); got != netip.MustParseAddr("198.18.7.9") {
			t.Fatalf("IP_PKTINFO after a %d-byte message: got %v", len(oob), got)
		}
	})
}

func udpConn(t *testing.T) (*net.UDPConn, syscall.RawConn) {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return c, rc
}

// A Writer's batch arrives whole at a Reader: payloads, source addresses,
// and the destination each datagram was sent to (IP_PKTINFO), with the
// reply's source set by SourceOOB.
func TestBatchRoundTrip(t *testing.T) {
	srv, srvRC := udpConn(t)
	cli, cliRC := udpConn(t)
	if err := srvRC.Control(func(fd uintptr) {
		if err := unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	dst := srv.LocalAddr().(*net.UDPAddr).AddrPort()
	w := NewWriter(func(n int, err error) { t.Errorf("sendmmsg refused %d messages: %v", n, err) })
	var oob [PktinfoLen]byte
	const n = 5
	payloads := make([][]byte, n)
	for i := range n {
		payloads[i] = fmt.Appendf(nil, "datagram %d", i)
		if !w.Add(payloads[i], SourceOOB(&oob, netip.MustParseAddr("127.0.0.1")), dst) {
			t.Fatal("Add refused an IPv4 datagram")
		}
	}
	if w.Add(nil, nil, dst) || w.Add([]byte("x"), nil, netip.MustParseAddrPort("[::1]:53")) {
		t.Error("Add took an empty datagram or an IPv6 destination")
	}
	w.Flush(cliRC)
	r := NewReader(srvRC)
	bufs := make([][]byte, n)
	oobs := make([][]byte, n)
	for i := range n {
		bufs[i], oobs[i] = make([]byte, 64), aligned(make([]byte, 64))
		r.Set(i, bufs[i], oobs[i])
	}
	got := 0
	deadline := time.Now().Add(2 * time.Second)
	for got < n && time.Now().Before(deadline) {
		var k int
		var errno syscall.Errno
		srvRC.Control(func(fd uintptr) { k, errno = r.Recv(fd, n-got) })
		if errno == unix.EAGAIN {
			time.Sleep(time.Millisecond)
			continue
		}
		if errno != 0 {
			t.Fatal(errno)
		}
		for i := range k {
			size, oobn, src, ok := r.Msg(i)
			if !ok || src != cli.LocalAddr().(*net.UDPAddr).AddrPort() {
				t.Errorf("message %d: source %v (ok %v)", got+i, src, ok)
			}
			if string(bufs[i][:size]) != string(payloads[got+i]) {
				t.Errorf("message %d: %q", got+i, bufs[i][:size])
			}
			if d := Pktinfo(oobs[i][:oobn]); d != dst.Addr() {
				t.Errorf("message %d: destination %v, want %v", got+i, d, dst.Addr())
			}
		}
		got += k
	}
	if got != n {
		t.Fatalf("read %d of %d datagrams", got, n)
	}
}

// Read waits for datagrams and reports their lengths.
func TestReadWaits(t *testing.T) {
	srv, srvRC := udpConn(t)
	cli, _ := udpConn(t)
	go func() {
		time.Sleep(20 * time.Millisecond)
		cli.WriteToUDP([]byte("late"), srv.LocalAddr().(*net.UDPAddr))
	}()
	r := NewReader(srvRC)
	bufs := [][]byte{make([]byte, 16), make([]byte, 16)}
	lens := make([]int, 2)
	n, err := r.Read(bufs, lens)
	if err != nil || n != 1 || string(bufs[0][:lens[0]]) != "late" {
		t.Fatalf("Read: %d, %v, %q", n, err, bufs[0][:lens[0]])
	}
}

// faultyBatch is a BatchWriter that refuses the messages whose payload
// starts with "bad" as sendmmsg does: it sends up to the first refused
// one, and fails only when that one is first.
type faultyBatch struct{ sent []string }

func (f *faultyBatch) WriteBatch(ms []ipv4.Message, _ int) (int, error) {
	for i, m := range ms {
		if string(m.Buffers[0][:3]) == "bad" {
			if i == 0 {
				return 0, syscall.EPERM
			}
			return i, nil
		}
		f.sent = append(f.sent, string(m.Buffers[0]))
	}
	return len(ms), nil
}

// TestWriteAllSendsTheRest: a message the kernel refuses in the middle of
// a batch is reported and skipped, and every message after it is still
// sent.
func TestWriteAllSendsTheRest(t *testing.T) {
	var ms []ipv4.Message
	for _, p := range []string{"ok0", "bad1", "ok2", "bad3", "bad4", "ok5"} {
		ms = append(ms, ipv4.Message{Buffers: [][]byte{[]byte(p)}})
	}
	f := &faultyBatch{}
	var failed []int
	n := WriteAll(f, ms, func(i int, err error) {
		if !errors.Is(err, syscall.EPERM) {
			t.Errorf("message %d: error %v", i, err)
		}
		failed = append(failed, i)
	})
	if n != 3 || fmt.Sprint(f.sent) != "[ok0 ok2 ok5]" || fmt.Sprint(failed) != "[1 3 4]" {
		t.Fatalf("sent %d %v, failed %v; want 3 [ok0 ok2 ok5], [1 3 4]", n, f.sent, failed)
	}
}

// failingRaw is a RawConn whose socket cannot be written (closed).
type failingRaw struct{ syscall.RawConn }

func (failingRaw) Write(func(uintptr) bool) error { return net.ErrClosed }

// TestWriterReportsDropped: a datagram the kernel refuses (to port 0)
// is reported and the rest of the batch arrives; a
// Flush on a socket that cannot be written reports every datagram it
// queued.
func TestWriterReportsDropped(t *testing.T) {
	srv, _ := udpConn(t)
	_, cliRC := udpConn(t)
	dst := srv.LocalAddr().(*net.UDPAddr).AddrPort()
	var dropped []string
	w := NewWriter(func(n int, err error) { dropped = append(dropped, fmt.Sprintf("%d %v", n, err)) })
	w.Add([]byte("one"), nil, dst)
	w.Add([]byte("refused"), nil, netip.MustParseAddrPort("127.0.0.1:0"))
	w.Add([]byte("two"), nil, dst)
	w.Flush(cliRC)
	if len(dropped) != 1 || !strings.HasPrefix(dropped[0], "1 ") {
		t.Fatalf("reported %v, want the one broadcast", dropped)
	}
	srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	for _, want := range []string{"one", "two"} {
		n, err := srv.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("got %q %v, want %q", buf[:n], err, want)
		}
	}
	dropped = nil
	w.Add([]byte("a"), nil, dst)
	w.Add([]byte("b"), nil, dst)
	w.Flush(failingRaw{cliRC})
	if fmt.Sprint(dropped) != "[2 "+net.ErrClosed.Error()+"]" {
		t.Fatalf("reported %v, want 2 datagrams", dropped)
	}
}
