package main

import (
	"context"
	"flag"
	"fmt"
	"net"

	"golang.org/x/net/ipv4"
)

// echo is the floor the latency line is read against: dnsd's structure
// with none of its work. A goroutine reads up to 32 datagrams per
// recvmmsg, waiting for readiness in Go's poller as dnsd's readers do,
// and sends them straight back with their QR bit set (so a latency client
// counts them as answered) in one sendmmsg. What p99 it shows at a rate
// is what this machine's scheduling, the Go runtime and loopback cost a
// server built this way at that rate, before it does any DNS work.
//
//	echo -addr 127.0.0.1:15356
func echo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("echo", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:15356", "UDP address")
	_ = fs.Parse(args)
	pc, err := net.ListenPacket("udp4", *addr)
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, func() { pc.Close() })
	fmt.Println(pc.LocalAddr())
	bc := ipv4.NewPacketConn(pc)
	ms := make([]ipv4.Message, 32)
	for i := range ms {
		ms[i].Buffers = [][]byte{make([]byte, 1500)}
	}
	out := make([]ipv4.Message, 0, len(ms))
	for {
		n, err := bc.ReadBatch(ms, 0)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("echo: %w", err)
		}
		out = out[:0]
		for _, m := range ms[:n] {
			if m.N < 12 {
				continue
			}
			b := m.Buffers[0][:m.N]
			b[2] |= 0x80
			out = append(out, ipv4.Message{Buffers: [][]byte{b}, Addr: m.Addr})
		}
		for sent := 0; sent < len(out); {
			k, err := bc.WriteBatch(out[sent:], 0)
			if err != nil {
				break // a reply that cannot go is lost, as a full socket loses it
			}
			sent += k
		}
	}
}
