package bpf

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

var flowWorld = mustAddr("198.18.200.10")

// flowNS makes a netns holding the sandbox's and a world address on
// loopback. A test run looks sockets up in the caller's netns and runs on
// its loopback, whose ifindex (1) is the one unitPath configures, so a
// connection dialed there (dialFlow, inside n.do) stands for a flow a
// proxy-side socket owns.
func flowNS(t testing.TB) *ns {
	t.Helper()
	n := newNS(t, "flow")
	lo, err := n.nl.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []netip.Addr{unitNet.Addr, flowWorld} {
		if err := n.nl.AddrAdd(lo, addr32(a)); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// flow is one connection sandbox:sport -> world:443 over loopback; server is
// the accepted (owning) end.
type flow struct {
	l              net.Listener
	client, server net.Conn
	sport          uint16
}

func dialFlow() (*flow, error) {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(context.Background(), "tcp4", netip.AddrPortFrom(flowWorld, 443).String())
	if err != nil {
		return nil, err
	}
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(unitNet.Addr, 0)), Timeout: 5 * time.Second}
	d.SetMultipathTCP(false)
	c, err := d.Dial("tcp4", l.Addr().String())
	if err != nil {
		l.Close()
		return nil, err
	}
	s, err := l.Accept()
	if err != nil {
		c.Close()
		l.Close()
		return nil, err
	}
	return &flow{l: l, client: c, server: s, sport: uint16(c.LocalAddr().(*net.TCPAddr).Port)}, nil
}

// segment is a frame of this flow from the sandbox with the given TCP flags.
func (f *flow) segment(flags byte) []byte {
	return ethFrame(macSandbox, 0x0800, ipv4Packet(ipOpts{proto: 6, src: unitNet.Addr, dst: flowWorld},
		tcpSegment(f.sport, 443, flags)))
}

func (f *flow) close() {
	f.client.Close()
	f.server.Close()
	f.l.Close()
}

// toTimeWait closes the flow server side first, so the owning end is left
// in TIME_WAIT, and waits until the netns's table shows it.
func (f *flow) toTimeWait() error {
	f.server.Close()
	if _, err := io.Copy(io.Discard, f.client); err != nil {
		return err
	}
	f.client.Close()
	f.l.Close()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if ok, err := hasTimeWait(443, f.sport); ok || err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.New("no TIME_WAIT socket for the flow")
}

// hasTimeWait reports whether the calling thread's netns holds a TIME_WAIT
// socket local:lport remote:rport (/proc/thread-self/net/tcp, state 06).
func hasTimeWait(lport, rport uint16) (bool, error) {
	fh, err := os.Open("/proc/thread-self/net/tcp")
	if err != nil {
		return false, err
	}
	defer fh.Close()
	local, remote := fmt.Sprintf(":%04X", lport), fmt.Sprintf(":%04X", rport)
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 3 && strings.HasSuffix(f[1], local) && strings.HasSuffix(f[2], remote) && f[3] == "06" {
			return true, nil
		}
	}
	return false, sc.Err()
}

// A segment of a flow some socket already owns goes to that socket, never to
// the proxy listener: an ACK, a SYN that hits the established 4-tuple, and a
// SYN that hits the owner's TIME_WAIT. With an empty SOCKMAP the difference
// shows in the reason: the owned ones fail only at bpf_sk_assign (a test run
// is not at TC ingress), the others find no proxy listener.
func TestProgramKeepsOwnedFlows(t *testing.T) {
	requireRoot(t)
	p := unitPath(t, false)
	n := flowNS(t)
	err := n.do(func() error {
		f, err := dialFlow()
		if err != nil {
			return err
		}
		defer f.close()
		other := *f
		other.sport++
		check := func(name string, frame []byte, want Reason) {
			before, _ := p.Stats(unitNet.Sandbox.Num)
			if ret := runOnce(t, p, frame); ret != actShot {
				t.Errorf("%s: verdict %d, want drop in a test run", name, ret)
			}
			after, _ := p.Stats(unitNet.Sandbox.Num)
			if after.Dropped[want]-before.Dropped[want] != 1 {
				t.Errorf("%s: want one %v drop: %s", name, want, fmtStats(after))
			}
		}
		check("ack of an established flow", f.segment(0x10), ReasonAssign)
		check("syn on an established 4-tuple", f.segment(0x02), ReasonAssign)
		check("syn from a port no socket owns", other.segment(0x02), ReasonNoProxy)
		if err := f.toTimeWait(); err != nil {
			return err
		}
		check("syn on a TIME_WAIT 4-tuple", f.segment(0x02), ReasonAssign)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
