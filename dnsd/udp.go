package dnsd

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"airlock/audit"
	"airlock/dnsd/internal/udpio"
	"airlock/dnsd/internal/upstream"
)

// dnsd reads IPv4 UDP itself instead of through dns.Server: one reader per
// SO_REUSEPORT socket, pooled packet buffers, no per-packet parsing of
// control messages beyond IP_PKTINFO, and replies sent from the address
// each query was sent to (which transparent sockets need). Messages are
// still miekg/dns messages, and TCP stays on dns.Server.

const (
	maxUDPQuery = 4096
	oobSize     = 64
	udpBatch    = udpio.Batch // messages per recvmmsg/sendmmsg
)

// packet is one received query and the state to answer it.
type packet struct {
	pc    *net.UDPConn
	local net.Addr
	buf   [maxUDPQuery]byte
	oob   [oobSize]byte
	out   []byte // pack buffer for the answer
	n     int
	src   netip.AddrPort
	dst   netip.Addr // the query's destination address (IP_PKTINFO)
	reply [udpio.PktinfoLen]byte

	bc   *ipv4.PacketConn // pc, for the batched replies of misses
	sock *udpSock         // the socket it came from (batched replies)
	// rd is the reader handling the packet; nil once the packet is handed
	// on (to an upstream socket or a worker) and on the paths that may
	// block.
	rd *udpReader

	// upq holds the packed upstream query of a miss the reader sends itself.
	upq [512]byte

	// batched: Write keeps the answer in out for the reader's sendmmsg
	// instead of sending it; queued says an answer is waiting there.
	batched, queued bool
	bufs            [1][]byte

	// Storage reused for every query this packet carries, so answering
	// from the cache or denying allocates no request, query, event record
	// or error answer.
	to      net.UDPAddr // the reply's destination, for sendmmsg
	toIP    [4]byte
	msg     dns.Msg
	st      reqStore
	q       query
	rec     audit.DNS
	scratch answerScratch
}

var packetPool = sync.Pool{New: func() any { return &packet{out: make([]byte, 0, 1232)} }}

// udpWriter answers one packet; it is the packet itself.
type udpWriter packet

func (w *udpWriter) LocalAddr() net.Addr { return w.local }
func (w *udpWriter) RemoteAddr() net.Addr {
	return net.UDPAddrFromAddrPort(w.src)
}

func (w *udpWriter) WriteMsg(m *dns.Msg) error {
	b, err := m.PackBuffer(w.out[:cap(w.out)])
	if err != nil {
		return err
	}
	w.out = b[:0]
	_, err = w.Write(b)
	return err
}

func (w *udpWriter) Write(b []byte) (int, error) {
	if w.batched {
		if cap(w.out) > 0 && len(b) > 0 && &b[0] == &w.out[:1][0] {
			w.out = b // packed in place by WriteMsg
		} else {
			w.out = append(w.out[:0], b...)
		}
		w.queued = true
		return len(b), nil
	}
	var oob []byte
	if w.dst.Is4() {
		oob = w.replyOOB()
	}
	n, _, err := w.pc.WriteMsgUDPAddrPort(b, oob, w.src)
	return n, err
}

// replyOOB is an IP_PKTINFO control message setting the source address.
func (w *udpWriter) replyOOB() []byte { return udpio.SourceOOB(&w.reply, w.dst) }

func (w *udpWriter) Close() error        { return nil }
func (w *udpWriter) TsigStatus() error   { return nil }
func (w *udpWriter) TsigTimersOnly(bool) {}
func (w *udpWriter) Hijack()             {}

// replyAddr is the query's source as a *net.UDPAddr, in the packet's own
// storage (no allocation per reply).
func (p *packet) replyAddr() *net.UDPAddr {
	a := p.src.Addr()
	if !a.Is4() {
		return net.UDPAddrFromAddrPort(p.src)
	}
	p.toIP = a.As4()
	p.to = net.UDPAddr{IP: p.toIP[:], Port: int(p.src.Port())}
	return &p.to
}

// udpSock is one of the server's IPv4 UDP sockets.
type udpSock struct {
	pc    *net.UDPConn
	rc    syscall.RawConn
	bc    *ipv4.PacketConn
	local net.Addr
}

// udpReader is the state of the goroutine reading one socket.
type udpReader struct {
	s    *Server
	rd   *udpio.Reader
	tab  names
	pkts []*packet
	send upstream.Sender[*packet] // the batch's misses, to upstream sockets
	rep  *replies                 // the answers of a batch

	// poll reads a batch from the socket fd without waiting, into n and
	// errno (made once: no closure per read).
	poll  func(fd uintptr)
	n     int
	errno syscall.Errno
}

// serveUDP4 reads queries from an IPv4 UDP socket until it is closed,
// up to udpBatch at a time (recvmmsg), and sends the answers it could give
// without the network in one sendmmsg.
func (s *Server) serveUDP4(pc *net.UDPConn) error {
	rc, err := pc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
	}); err != nil || serr != nil {
		return errors.Join(err, serr)
	}
	us := &udpSock{pc: pc, rc: rc, bc: ipv4.NewPacketConn(pc), local: pc.LocalAddr()}
	r := &udpReader{s: s, rd: udpio.NewReader(rc), tab: make(names), pkts: make([]*packet, udpBatch), rep: newReplies(s)}
	r.poll = func(fd uintptr) {
		r.fill()
		r.n, r.errno = r.rd.Recv(fd, len(r.pkts))
	}
	// The whole loop runs inside one RawConn.Read. A read that returns
	// fewer than udpBatch messages met an empty socket, so the reader
	// waits for readiness at once instead of asking recvmmsg again only
	// to learn it is empty: the poller's edge-triggered readiness fires
	// for every datagram queued after that read.
	var (
		errno syscall.Errno
		stop  bool
	)
	loop := func(fd uintptr) bool {
		for {
			r.poll(fd)
			if r.errno == unix.EAGAIN {
				return false // wait until readable
			}
			if r.errno != 0 {
				errno = r.errno
				return true
			}
			n := r.n
			r.handle(us, n)
			if n == len(r.pkts) {
				// A socket that never runs dry never waits for
				// readiness, where a close would be noticed: look
				// for it here (Control fails once it is closing).
				if rc.Control(func(uintptr) {}) != nil {
					stop = true
					return true
				}
				continue
			}
			return false
		}
	}
	for {
		errno, stop = 0, false
		err := rc.Read(loop)
		if err == nil && errno != 0 {
			err = errno
		}
		if (err == nil && stop) || s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
			return nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			continue
		}
		if err != nil {
			return err
		}
	}
}

// fill replaces the packets handle gave away and points the reader at
// their buffers.
func (r *udpReader) fill() {
	for i, p := range r.pkts {
		if p == nil {
			p = packetPool.Get().(*packet)
			r.pkts[i] = p
		}
		r.rd.Set(i, p.buf[:], p.oob[:])
	}
}

// handle answers the n queries read from us into r.pkts: what needs no
// network in one sendmmsg, cache misses sent upstream in one sendmmsg per
// upstream socket (or given to a worker).
func (r *udpReader) handle(us *udpSock, n int) {
	s := r.s
	for i := 0; i < n; i++ {
		p := r.pkts[i]
		size, oobn, src, ok := r.rd.Msg(i)
		if !ok || size < 12 || size >= len(p.buf) || binary.BigEndian.Uint16(p.buf[2:])&0x8000 != 0 {
			continue // short, oversized, or a response: drop, never reflect
		}
		p.pc, p.bc, p.local, p.sock, p.n = us.pc, us.bc, us.local, us, size
		p.src = src
		p.dst = udpio.Pktinfo(p.oob[:min(oobn, len(p.oob))])
		p.batched, p.queued, p.rd = true, false, r
		if !s.handlePacket(p, r.tab) {
			r.pkts[i] = nil // an upstream socket or a worker owns it now
			continue
		}
		if p.queued {
			r.rep.add(p)
		}
	}
	r.send.Flush()
	r.rep.flush(us)
}

// handlePacket answers what needs no network (denials, guards, cache hits)
// on the reading goroutine and reports true; for a cache miss it reports
// false: the chain's forward step gave p to an upstream socket or a worker
// (sendMiss), which own it now, so a slow upstream never holds the socket.
func (s *Server) handlePacket(p *packet, tab names) bool {
	req := &p.msg
	lname, fast := tab.fastParse(p.buf[:p.n], req, &p.st)
	if !fast {
		if err := req.Unpack(p.buf[:p.n]); err != nil {
			s.formErr(p, err)
			return true
		}
	}
	q := s.initQuery(&p.q, (*udpWriter)(p), req)
	q.lname, q.pkt = lname, p
	return s.resume(q)
}

// maxSlowWorkers bounds the goroutines kept waiting for cache misses.
const maxSlowWorkers = 256

// dispatchSlow hands a cache miss to an idle worker, or starts one: workers
// stay for the next miss (their stacks already grown), up to
// maxSlowWorkers; beyond that a goroutine serves one miss and ends, so a
// slow upstream never holds up the reader.
func (s *Server) dispatchSlow(p *packet) {
	p.rd, p.batched = nil, false // a worker may block, and writes itself
	select {
	case s.slowq <- p:
		return
	default:
	}
	if s.slowWorkers.Add(1) <= maxSlowWorkers {
		go s.slowWorker(p)
		return
	}
	s.slowWorkers.Add(-1)
	go s.finishPacket(p)
}

func (s *Server) slowWorker(p *packet) {
	defer s.slowWorkers.Add(-1)
	for {
		s.finishPacket(p)
		p = nil
		select {
		case p = <-s.slowq:
		case <-s.ctx.Done():
			return
		}
	}
}

// finishPacket answers a cache miss and returns its packet to the pool.
func (s *Server) finishPacket(p *packet) {
	s.resume(&p.q)
	packetPool.Put(p)
}

// formErr answers a message that does not parse with FORMERR when its
// header is intact, like dns.Server, and logs it (rate-limited per source).
func (s *Server) formErr(p *packet, err error) {
	req := new(dns.Msg)
	req.Id = binary.BigEndian.Uint16(p.buf[0:])
	q := s.newQuery((*udpWriter)(p), req)
	s.markUnparsed(q, err)
	s.writeAndLog(q)
}
