package preview

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// DialNetns connects to 127.0.0.1:port in the network namespace of host
// process pid (a sandbox's PID 1): the socket is created inside that
// namespace on a locked OS thread, which then returns; the connect and
// every read and write run on the normal runtime. The connection never
// touches the sandbox's veth or the host's network. Root only.
func DialNetns(ctx context.Context, pid int, port uint16) (net.Conn, error) {
	fd, err := socketIn(pid)
	if err != nil {
		return nil, err
	}
	return connectFD(ctx, fd, pid, port)
}

// connectFD connects fd (a blocking socket) and wraps it; a loopback
// connect either succeeds or is refused at once, bounded again by ctx.
func connectFD(ctx context.Context, fd, pid int, port uint16) (net.Conn, error) {
	done := make(chan error, 1)
	go func() { done <- unix.Connect(fd, &unix.SockaddrInet4{Port: int(port), Addr: [4]byte{127, 0, 0, 1}}) }()
	select {
	case err := <-done:
		if err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("preview: connect to 127.0.0.1:%d in the netns of pid %d: %w", port, pid, err)
		}
	case <-ctx.Done():
		unix.Shutdown(fd, unix.SHUT_RDWR)
		<-done
		unix.Close(fd)
		return nil, fmt.Errorf("preview: connect to port %d: %w", port, ctx.Err())
	}
	f := os.NewFile(uintptr(fd), "preview")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("preview: wrap socket: %w", err)
	}
	return c, nil
}

// socketIn creates a TCP socket in pid's network namespace. A thread that
// cannot get back to the host namespace stays locked and ends with its
// goroutine, never reused.
func socketIn(pid int) (int, error) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, fmt.Errorf("preview: pidfd_open(%d): %w", pid, err)
	}
	defer unix.Close(pidfd)
	type res struct {
		fd  int
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- res{-1, fmt.Errorf("preview: open own netns: %w", err)}
			return
		}
		defer unix.Close(self)
		if err := unix.Setns(pidfd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- res{-1, fmt.Errorf("preview: enter the netns of pid %d: %w", pid, err)}
			return
		}
		fd, serr := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
			if serr == nil {
				unix.Close(fd)
			}
			ch <- res{-1, fmt.Errorf("preview: return to the host netns: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		if serr != nil {
			serr = fmt.Errorf("preview: socket in the netns of pid %d: %w", pid, serr)
		}
		ch <- res{fd, serr}
	}()
	r := <-ch
	return r.fd, r.err
}
