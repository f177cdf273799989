package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The explicit listener defers accepting a connection until its first
// bytes arrive (TCP_DEFER_ACCEPT); a client that stays silent past the
// deferral and only then sends its CONNECT is still served.
func TestExplicitClientSilentPastAcceptDeferralIsServed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	deferAccept(ln, 300*time.Millisecond)
	rc, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var gerr error
	rc.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT) })
	if gerr != nil || got == 0 {
		t.Fatalf("TCP_DEFER_ACCEPT on the explicit listener: %d, %v", got, gerr)
	}

	e := newEnv(t) // its explicit listener defers by 1 s (SniffTimeout 300 ms)
	c, err := net.DialTimeout("tcp", e.explicit, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(1500 * time.Millisecond) // silent past the deferral
	c.SetDeadline(time.Now().Add(10 * time.Second))
	authority := net.JoinHostPort("splice.example.test", strconv.Itoa(int(e.w.tlsPort)))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT after a silent wait: %v, %v", resp, err)
	}
}
