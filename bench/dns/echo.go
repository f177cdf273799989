package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"runtime"

	"golang.org/x/sys/unix"
)

// echo is the floor the latency line is read against: a server that does
// no DNS work at all. One thread blocks in recvfrom on a UDP socket and
// sends each datagram straight back with its QR bit set, so a latency
// client counts it as answered. Whatever p99 it shows at a rate is what
// this machine's scheduling and loopback cost any server at that rate.
//
//	echo -addr 127.0.0.1:15355
func echo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("echo", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:15355", "UDP address")
	_ = fs.Parse(args)
	ua, err := net.ResolveUDPAddr("udp4", *addr)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("echo: socket: %w", err)
	}
	sa := &unix.SockaddrInet4{Port: ua.Port}
	copy(sa.Addr[:], ua.IP.To4())
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return fmt.Errorf("echo: bind %s: %w", *addr, err)
	}
	go func() { <-ctx.Done(); unix.Shutdown(fd, unix.SHUT_RDWR) }()
	fmt.Println(*addr)
	runtime.LockOSThread()
	var buf [1500]byte
	for ctx.Err() == nil {
		n, from, err := unix.Recvfrom(fd, buf[:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("echo: recvfrom: %w", err)
		}
		if n < 12 || from == nil {
			continue
		}
		buf[2] |= 0x80
		unix.Sendto(fd, buf[:n], 0, from)
	}
	return nil
}
