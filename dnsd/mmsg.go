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

// readBatch reads into pkts (len udpBatch), returning how many arrived.
func (r *mmsgReader) readBatch(pkts []*packet) (int, error) {
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
	r.n, r.errno = 0, 0
	if err := r.rc.Read(r.read); err != nil {
		return 0, err
	}
	if r.errno != 0 {
		return 0, r.errno
	}
	return r.n, nil
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
