// Package udpio is dnsd's batched UDP I/O on Linux: recvmmsg and sendmmsg
// without an allocation per datagram, and the IP_PKTINFO control messages
// that let a transparent socket answer from the address each query was
// sent to.
//
// The reads and writes a UDP reader makes while it already knows its
// socket is ready are raw system calls: both are non-blocking socket
// calls, and skipping the runtime's entersyscall/exitsyscall also skips
// waking the runtime's monitor thread, which the first system call after
// an idle spell otherwise does for every query at low rates (two thread
// switches on the server's CPU per query).
package udpio

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// Batch is the most datagrams one Reader or Writer call moves.
const Batch = 32

// mmsghdr is struct mmsghdr of linux/socket.h.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// Reader reads up to Batch datagrams per recvmmsg into buffers its caller
// owns, with the source addresses in its own storage: unlike
// ipv4.PacketConn.ReadBatch, which allocates a *net.UDPAddr per message,
// it allocates nothing per read. A Reader is used by one goroutine.
type Reader struct {
	rc    syscall.RawConn
	hdrs  [Batch]mmsghdr
	iovs  [Batch]unix.Iovec
	names [Batch]unix.RawSockaddrInet6 // large enough for IPv4 and IPv6
	read  func(fd uintptr) bool        // made once: no closure per read
	n     int
	vlen  int
	errno syscall.Errno
}

// NewReader returns a Reader for the socket behind rc (nil when the
// caller only uses Recv, which takes the descriptor itself).
func NewReader(rc syscall.RawConn) *Reader {
	r := &Reader{rc: rc, vlen: Batch}
	r.read = func(fd uintptr) bool {
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(r.vlen), 0, 0, 0)
		for e == unix.EINTR {
			n, _, e = unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(r.vlen), 0, 0, 0)
		}
		if e == unix.EAGAIN {
			return false // wait until readable
		}
		r.n, r.errno = int(n), e
		return true
	}
	return r
}

// SetConn points r at another socket (a pooled Reader's next one).
func (r *Reader) SetConn(rc syscall.RawConn) { r.rc = rc }

// Set makes buf (and oob, for control messages, when not empty) the
// storage of message i of the next Recv. buf must not be empty.
func (r *Reader) Set(i int, buf, oob []byte) {
	h := &r.hdrs[i]
	r.iovs[i] = unix.Iovec{Base: &buf[0]}
	r.iovs[i].SetLen(len(buf))
	h.hdr = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&r.names[i])), Namelen: unix.SizeofSockaddrInet6, Iov: &r.iovs[i]}
	h.hdr.Iovlen = 1
	if len(oob) > 0 {
		h.hdr.Control = &oob[0]
		h.hdr.SetControllen(len(oob))
	}
	h.len = 0
}

// Recv reads up to n (at most Batch) datagrams from fd into the storage
// Set gave, without waiting; errno is EAGAIN when none was queued.
func (r *Reader) Recv(fd uintptr, n int) (int, syscall.Errno) {
	for {
		k, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(min(n, Batch)), 0, 0, 0)
		if e != unix.EINTR {
			if e != 0 {
				return 0, e
			}
			return int(k), 0
		}
	}
}

// Msg returns the length, control length and source of message i of the
// last Recv or Read; ok is false for a source that is not IP.
func (r *Reader) Msg(i int) (n, oobn int, src netip.AddrPort, ok bool) {
	h := &r.hdrs[i]
	sa := &r.names[i]
	var a netip.Addr
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		a = netip.AddrFrom4(sa4.Addr)
	case unix.AF_INET6:
		a = netip.AddrFrom16(sa.Addr).Unmap()
	default:
		return 0, 0, netip.AddrPort{}, false
	}
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
	return int(h.len), int(h.hdr.Controllen), netip.AddrPortFrom(a, port), true
}

// Read waits until the socket is readable and reads up to len(bufs) (at
// most Batch) datagrams into bufs; lens gets their lengths.
func (r *Reader) Read(bufs [][]byte, lens []int) (int, error) {
	k := min(len(bufs), Batch)
	for i := range k {
		r.Set(i, bufs[i], nil)
	}
	r.vlen = k
	r.n, r.errno = 0, 0
	err := r.rc.Read(r.read)
	r.vlen = Batch
	if err != nil {
		return 0, err
	}
	if r.errno != 0 {
		return 0, r.errno
	}
	for i := range r.n {
		lens[i] = int(r.hdrs[i].len)
	}
	return r.n, nil
}

// Writer sends up to Batch datagrams to IPv4 destinations in one
// sendmmsg. A Writer is used by one goroutine.
type Writer struct {
	hdrs  [Batch]mmsghdr
	iovs  [Batch]unix.Iovec
	names [Batch]unix.RawSockaddrInet4
	n     int
	sent  int
	send  func(fd uintptr) bool  // made once: no closure per write
	err   func(n int, err error) // reports datagrams not sent
}

// NewWriter returns a Writer that reports each datagram the kernel
// refuses to onErr (n = 1) and goes on with the rest; a Flush that fails
// as a whole reports the datagrams it did not send.
func NewWriter(onErr func(n int, err error)) *Writer {
	w := &Writer{err: onErr}
	w.send = func(fd uintptr) bool {
		for w.sent < w.n {
			k, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&w.hdrs[w.sent])), uintptr(w.n-w.sent), 0, 0, 0)
			switch e {
			case 0:
				w.sent += int(k)
			case unix.EINTR:
			case unix.EAGAIN:
				return false // wait until writable
			default:
				w.err(1, e)
				w.sent++ // the message that failed; send the rest
			}
		}
		return true
	}
	return w
}

// Add queues b for dst (IPv4) with the control message oob; false when
// the batch is full, dst is not IPv4 or b is empty. b and oob must stay
// unchanged until Flush.
func (w *Writer) Add(b, oob []byte, dst netip.AddrPort) bool {
	if w.n == len(w.hdrs) || !dst.Addr().Is4() || len(b) == 0 {
		return false
	}
	i := w.n
	sa := &w.names[i]
	*sa = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: dst.Addr().As4()}
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], dst.Port())
	w.iovs[i] = unix.Iovec{Base: &b[0]}
	w.iovs[i].SetLen(len(b))
	h := &w.hdrs[i]
	h.hdr = unix.Msghdr{Name: (*byte)(unsafe.Pointer(sa)), Namelen: unix.SizeofSockaddrInet4, Iov: &w.iovs[i]}
	h.hdr.Iovlen = 1
	if len(oob) > 0 {
		h.hdr.Control = &oob[0]
		h.hdr.SetControllen(len(oob))
	}
	h.len = 0
	w.n++
	return true
}

// Flush sends what Add queued on rc's socket. When rc cannot be written
// at all (a closed socket), the datagrams not sent are reported.
func (w *Writer) Flush(rc syscall.RawConn) {
	if w.n == 0 {
		return
	}
	w.sent = 0
	if err := rc.Write(w.send); err != nil && w.sent < w.n {
		w.err(w.n-w.sent, err)
	}
	w.n = 0
}

// BatchWriter sends datagrams with sendmmsg: ipv4.PacketConn's WriteBatch.
type BatchWriter interface {
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

// WriteAll sends every message of ms. sendmmsg stops at the first message
// the kernel refuses, and reports an error only when that one is first:
// so each refused message is reported to failed, with its index, and
// skipped, and the rest are still sent. It returns how many were sent.
func WriteAll(w BatchWriter, ms []ipv4.Message, failed func(i int, err error)) int {
	n := 0
	for i := 0; i < len(ms); {
		k, err := w.WriteBatch(ms[i:], 0)
		if err == nil && k <= 0 {
			err = errNoProgress
		}
		if err != nil {
			failed(i, err)
			i++
			continue
		}
		i += k
		n += k
	}
	return n
}

var errNoProgress = errors.New("sendmmsg sent nothing and reported no error")

// PktinfoLen is the size of the control message SourceOOB builds.
const PktinfoLen = unix.SizeofCmsghdr + unix.SizeofInet4Pktinfo

// SourceOOB builds in b an IP_PKTINFO control message that makes src (an
// IPv4 address) the source address of a datagram sent with it.
func SourceOOB(b *[PktinfoLen]byte, src netip.Addr) []byte {
	clear(b[:])
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
	h.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
	a := src.As4()
	copy(b[unix.SizeofCmsghdr+4:], a[:]) // in_pktinfo.ipi_spec_dst
	return b[:]
}

// Pktinfo returns the destination address in a received datagram's
// IP_PKTINFO control message (ipi_addr, the address in the packet's
// header), or the zero Addr when oob holds none.
func Pktinfo(oob []byte) netip.Addr {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return netip.Addr{}
		}
		if h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && l >= unix.SizeofCmsghdr+unix.SizeofInet4Pktinfo {
			d := oob[unix.SizeofCmsghdr+8 : unix.SizeofCmsghdr+12]
			return netip.AddrFrom4([4]byte(d))
		}
		oob = oob[min(len(oob), unix.CmsgSpace(l-unix.SizeofCmsghdr)):]
	}
	return netip.Addr{}
}
