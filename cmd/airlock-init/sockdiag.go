package main

import (
	"encoding/binary"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// Offsets in struct inet_diag_msg (linux/inet_diag.h): family, state,
// timer, retrans, then the 48-byte inet_diag_sockid, expires, rqueue,
// wqueue, uid, inode.
const (
	diagReqLen   = 56 // struct inet_diag_req_v2
	diagMsgLen   = 72 // struct inet_diag_msg
	diagMsgUID   = 64
	diagMsgInode = 68
)

// diagLookup finds one socket of the sandbox's netns by its four-tuple
// with one exact NETLINK_SOCK_DIAG request (no table walk: /proc/net/tcp
// walks the host-wide hash, ~12 ms here). It tries the tuple both ways
// round: the kernel's UDP lookup takes its source and destination swapped
// against TCP's. ok is false when there is no such socket, or it has no
// inode any more (closed: time-wait, orphaned).
func diagLookup(proto string, local, remote netip.AddrPort) (inode uint64, uid int, ok bool) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, 0, false
	}
	defer unix.Close(fd)
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200000})
	for _, pair := range [2][2]netip.AddrPort{{local, remote}, {remote, local}} {
		if inode, uid, ok := diagOne(fd, proto, pair[0], pair[1]); ok {
			return inode, uid, true
		}
	}
	return 0, 0, false
}

func diagOne(fd int, proto string, src, dst netip.AddrPort) (uint64, int, bool) {
	if err := unix.Sendto(fd, diagRequest(proto, src, dst), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, 0, false
	}
	buf := make([]byte, 8192)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil || n < unix.NLMSG_HDRLEN {
		return 0, 0, false
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return 0, 0, false
	}
	for _, m := range msgs {
		if m.Header.Type != unix.SOCK_DIAG_BY_FAMILY || len(m.Data) < diagMsgLen {
			continue // NLMSG_ERROR: no such socket
		}
		inode := binary.NativeEndian.Uint32(m.Data[diagMsgInode:])
		uid := binary.NativeEndian.Uint32(m.Data[diagMsgUID:])
		return uint64(inode), int(uid), inode != 0
	}
	return 0, 0, false
}

// diagRequest is an nlmsghdr and an inet_diag_req_v2 for one socket.
func diagRequest(proto string, src, dst netip.AddrPort) []byte {
	b := make([]byte, unix.NLMSG_HDRLEN+diagReqLen)
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(b[6:], unix.NLM_F_REQUEST)
	r := b[unix.NLMSG_HDRLEN:]
	r[0] = unix.AF_INET
	if src.Addr().Is6() && !src.Addr().Is4In6() {
		r[0] = unix.AF_INET6
	}
	r[1] = unix.IPPROTO_TCP
	if proto == "udp" {
		r[1] = unix.IPPROTO_UDP
	}
	binary.NativeEndian.PutUint32(r[4:], 0xffffffff) // every state
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], src.Port())
	binary.BigEndian.PutUint16(id[2:], dst.Port())
	putAddr(id[4:20], src.Addr(), r[0])
	putAddr(id[20:36], dst.Addr(), r[0])
	binary.NativeEndian.PutUint32(id[40:], 0xffffffff) // INET_DIAG_NOCOOKIE
	binary.NativeEndian.PutUint32(id[44:], 0xffffffff)
	return b
}

func putAddr(dst []byte, a netip.Addr, family byte) {
	if family == unix.AF_INET {
		v4 := a.Unmap().As4()
		copy(dst, v4[:])
		return
	}
	v6 := a.As16()
	copy(dst, v6[:])
}
