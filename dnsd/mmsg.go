package dnsd

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsgReader reads up to udpBatch datagrams per recvmmsg into packets'
// buffers, with their source addresses in its own storage: unlike
// ipv4.PacketConn.ReadBatch, which allocates a *net.UDPAddr per message,
// it allocates nothing per read. (Replies still go out with
// ipv4.PacketConn.WriteBatch, which does not allocate.)
type mmsgReader struct {
	rc    syscall.RawConn
	hdrs  [udpBatch]mmsghdr
	iovs  [udpBatch]unix.Iovec
	names [udpBatch]unix.RawSockaddrInet6 // large enough for IPv4 and IPv6
	read  func(fd uintptr) bool           // made once: no closure per read
	n     int
	vlen  int // messages to read (udpBatch unless readBufs says fewer)
	errno syscall.Errno
}

// mmsghdr is struct mmsghdr of linux/socket.h.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

func newMMsgReader(rc syscall.RawConn) *mmsgReader {
	r := &mmsgReader{rc: rc, vlen: udpBatch}
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

// recv reads up to len(pkts) (at most udpBatch) datagrams from fd into
// pkts without waiting; errno is EAGAIN when none was queued.
func (r *mmsgReader) recv(fd uintptr, pkts []*packet) (int, syscall.Errno) {
	r.setup(pkts)
	for {
		// Raw: a non-blocking call (see mmsgWriter).
		n, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(len(pkts)), 0, 0, 0)
		if e != unix.EINTR {
			if e != 0 {
				return 0, e
			}
			return int(n), 0
		}
	}
}

// setup points the message headers at pkts' buffers.
func (r *mmsgReader) setup(pkts []*packet) {
	for i, p := range pkts {
		h := &r.hdrs[i]
		r.iovs[i] = unix.Iovec{Base: &p.buf[0]}
		r.iovs[i].SetLen(len(p.buf))
		h.hdr = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&r.names[i])), Namelen: unix.SizeofSockaddrInet6,
			Iov: &r.iovs[i], Control: &p.oob[0]}
		h.hdr.Iovlen = 1
		h.hdr.SetControllen(len(p.oob))
		h.len = 0
	}
}

// msg returns the length, control length, and source of message i.
func (r *mmsgReader) msg(i int) (n, oobn int, src netip.AddrPort, ok bool) {
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

// readBufs reads up to len(bufs) (at most udpBatch) datagrams into bufs
// and returns how many arrived; lens gets their lengths.
func (r *mmsgReader) readBufs(bufs [][]byte, lens []int) (int, error) {
	k := min(len(bufs), udpBatch)
	for i := range k {
		h := &r.hdrs[i]
		r.iovs[i] = unix.Iovec{Base: &bufs[i][0]}
		r.iovs[i].SetLen(len(bufs[i]))
		h.hdr = unix.Msghdr{Iov: &r.iovs[i]}
		h.hdr.Iovlen = 1
		h.len = 0
	}
	r.vlen = k
	r.n, r.errno = 0, 0
	err := r.rc.Read(r.read)
	r.vlen = udpBatch
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

// mmsgWriter sends the answers of a batch in one sendmmsg. Like recv, it
// uses a raw system call: both are non-blocking socket calls, and
// skipping the runtime's entersyscall/exitsyscall also skips waking the
// runtime's monitor thread, which the first system call after an idle
// spell otherwise does for every query at low rates (two thread switches
// on the server's CPU per query).
type mmsgWriter struct {
	hdrs  [udpBatch]mmsghdr
	iovs  [udpBatch]unix.Iovec
	names [udpBatch]unix.RawSockaddrInet4
	n     int
	sent  int
	send  func(fd uintptr) bool // made once: no closure per write
	err   func(syscall.Errno)   // reports a message the kernel refused
}

func newMMsgWriter(onErr func(syscall.Errno)) *mmsgWriter {
	w := &mmsgWriter{err: onErr}
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
				w.err(e)
				w.sent++ // the message that failed; send the rest
			}
		}
		return true
	}
	return w
}

// add queues b for dst (IPv4) with the control message oob; false when
// the batch is full or dst is not IPv4.
func (w *mmsgWriter) add(b, oob []byte, dst netip.AddrPort) bool {
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

// flush sends what add queued on rc's socket.
func (w *mmsgWriter) flush(rc syscall.RawConn) error {
	if w.n == 0 {
		return nil
	}
	w.sent = 0
	err := rc.Write(w.send)
	w.n = 0
	return err
}
