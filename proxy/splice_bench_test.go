package proxy

import (
	"net"
	"testing"

	"airlock/proxy/internal/relay"

	"golang.org/x/sys/unix"
)

// BenchmarkExtraHop1MiB prices the second loopback TCP connection a
// splicing proxy adds, with process CPU time per MiB (both ends are in
// this process): "one-hop" is a server writing straight to its client;
// "blocking-splice" forwards through a second connection with the
// simplest forwarder (one thread in a blocking splice loop through one
// pipe: no epoll, no scheduler); "relay" is the proxy's relay. What relay
// costs over one-hop is, by the profile, almost all kernel work: the TCP
// send and receive of the second connection.
func BenchmarkExtraHop1MiB(b *testing.B) {
	for _, mode := range []string{"one-hop", "blocking-splice", "relay"} {
		b.Run(mode, func(b *testing.B) {
			client, pc := tcpPair(b)
			pu, server := tcpPair(b)
			switch mode {
			case "one-hop":
				server = pc
			case "blocking-splice":
				go spliceLoop(b, pu, pc)
			case "relay":
				f := &flow{}
				go tunnel(f, pc, pu, 0x7fffffffffffffff)
			}
			streamMiBs(b, server, client)
		})
	}
}

// spliceLoop moves from to to through one pipe with blocking splices
// until either end fails.
func spliceLoop(b *testing.B, from, to *net.TCPConn) {
	ff, err := from.File() // blocking duplicates: the loop sleeps in the kernel
	if err != nil {
		b.Error(err)
		return
	}
	defer ff.Close()
	tf, err := to.File()
	if err != nil {
		b.Error(err)
		return
	}
	defer tf.Close()
	unix.SetNonblock(int(ff.Fd()), false)
	unix.SetNonblock(int(tf.Fd()), false)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		b.Error(err)
		return
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	unix.FcntlInt(uintptr(p[0]), unix.F_SETPIPE_SZ, relay.PipeSize)
	for {
		n, err := unix.Splice(int(ff.Fd()), nil, p[1], nil, relay.PipeSize, unix.SPLICE_F_MOVE)
		if err != nil || n == 0 {
			return
		}
		for n > 0 {
			k, err := unix.Splice(p[0], nil, int(tf.Fd()), nil, int(n), unix.SPLICE_F_MOVE)
			if err != nil {
				return
			}
			n -= k
		}
	}
}
