package world

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// CanaryTCPPorts and CanaryUDPPorts are where the canary listens (and
// answers, so that a leak would also look like a success from inside). The
// packet capture records everything else that reaches its addresses.
var (
	CanaryTCPPorts = []uint16{22, 25, 53, 80, 443, 853, 1080, 3128, 5432, 8080, 8443, 9464, 15001}
	CanaryUDPPorts = []uint16{53, 123, 443, 853, 5353, 9999}
)

// CanaryBody is what the canary's TCP listeners write on accept.
const CanaryBody = "CANARY-REACHED"

func (w *World) startCanary() error {
	for _, a := range w.roleAddrs(RoleCanary) {
		for _, p := range CanaryTCPPorts {
			ln, err := w.listenTCP(netip.AddrPortFrom(a, p))
			if err != nil {
				return err
			}
			w.addCloser(ln)
			w.goServe(func() { w.canaryTCP(ln) })
		}
		for _, p := range CanaryUDPPorts {
			pc, err := w.listenUDP(netip.AddrPortFrom(a, p))
			if err != nil {
				return err
			}
			w.addCloser(pc)
			w.goServe(func() { w.canaryUDP(pc) })
		}
	}
	return nil
}

func (w *World) goServe(fn func()) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		fn()
	}()
}

func (w *World) canaryTCP(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		w.log.add(Record{Kind: KindConn, Role: RoleCanary, Proto: "tcp",
			Remote: c.RemoteAddr().String(), Local: c.LocalAddr().String()})
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = c.Write([]byte(CanaryBody + "\n"))
		c.Close()
	}
}

func (w *World) canaryUDP(pc net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		w.log.add(Record{Kind: KindConn, Role: RoleCanary, Proto: "udp",
			Remote: from.String(), Local: pc.LocalAddr().String(), Body: append([]byte(nil), buf[:n]...)})
		_, _ = pc.WriteTo([]byte(CanaryBody+"\n"), from)
	}
}

// capture reads every frame that arrives on the world's end of the veth
// (an AF_PACKET socket in the world's namespace) and records packets to
// the canary's addresses and packets from any source but the host end.
type capture struct {
	fd      int
	stop    atomic.Bool
	done    chan struct{}
	w       *World
	canary  map[netip.Addr]bool
	trusted map[netip.Addr]bool
}

func (w *World) startCapture() error {
	c := &capture{fd: -1, done: make(chan struct{}), w: w,
		canary: map[netip.Addr]bool{}, trusted: map[netip.Addr]bool{}}
	for _, a := range w.roleAddrs(RoleCanary) {
		c.canary[a] = true
	}
	for _, a := range []netip.Addr{w.HostAddr, w.HostAddr6} {
		if a.IsValid() {
			c.trusted[a] = true
		}
	}
	err := inNS(w.ns.handle, func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		c.fd = fd
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: w.worldIndex})
	})
	if err == nil {
		tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
		err = unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	}
	if err != nil {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
		return fmt.Errorf("world: packet capture: %w", err)
	}
	w.addCloser(c)
	go c.run()
	return nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (c *capture) Close() error {
	c.stop.Store(true)
	<-c.done
	return unix.Close(c.fd)
}

func (c *capture) run() {
	defer close(c.done)
	buf := make([]byte, 65536)
	for !c.stop.Load() {
		n, from, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if p, ok := parseFrame(buf[:n]); ok {
			c.judge(p)
		}
	}
}

func (c *capture) judge(p packet) {
	foreign := !c.trusted[p.src] && !p.src.IsLinkLocalUnicast() && !p.src.IsUnspecified()
	if !c.canary[p.dst] && !foreign {
		return
	}
	role := Role("world")
	if c.canary[p.dst] {
		role = RoleCanary
	}
	c.w.log.add(Record{Kind: KindPacket, Role: role, Proto: p.proto,
		Src: p.src.String(), Dst: p.dst.String(), DPort: p.dport, Foreign: foreign})
}

// packet is what the capture keeps of an IP packet.
type packet struct {
	proto    string
	src, dst netip.Addr
	dport    uint16
}

var protoNames = map[byte]string{1: "icmp", 6: "tcp", 17: "udp", 58: "icmpv6", 132: "sctp"}

func protoName(p byte) string {
	if n, ok := protoNames[p]; ok {
		return n
	}
	return fmt.Sprintf("ip-proto-%d", p)
}

// parseFrame reads an Ethernet frame carrying IPv4 or IPv6.
func parseFrame(f []byte) (packet, bool) {
	if len(f) < 14 {
		return packet{}, false
	}
	switch binary.BigEndian.Uint16(f[12:14]) {
	case unix.ETH_P_IP:
		return parseIPv4(f[14:])
	case unix.ETH_P_IPV6:
		return parseIPv6(f[14:])
	}
	return packet{}, false
}

func parseIPv4(b []byte) (packet, bool) {
	if len(b) < 20 || b[0]>>4 != 4 {
		return packet{}, false
	}
	ihl := int(b[0]&0x0f) * 4
	p := packet{
		proto: protoName(b[9]),
		src:   netip.AddrFrom4([4]byte(b[12:16])),
		dst:   netip.AddrFrom4([4]byte(b[16:20])),
	}
	fragOff := binary.BigEndian.Uint16(b[6:8]) & 0x1fff
	if (b[9] == 6 || b[9] == 17) && fragOff == 0 && len(b) >= ihl+4 {
		p.dport = binary.BigEndian.Uint16(b[ihl+2 : ihl+4])
	}
	return p, true
}

func parseIPv6(b []byte) (packet, bool) {
	if len(b) < 40 || b[0]>>4 != 6 {
		return packet{}, false
	}
	p := packet{
		proto: protoName(b[6]),
		src:   netip.AddrFrom16([16]byte(b[8:24])),
		dst:   netip.AddrFrom16([16]byte(b[24:40])),
	}
	if (b[6] == 6 || b[6] == 17) && len(b) >= 44 {
		p.dport = binary.BigEndian.Uint16(b[42:44])
	}
	return p, true
}
