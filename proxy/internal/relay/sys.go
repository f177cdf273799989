package relay

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The relay's system calls, raw like rawio's (see that package's doc):
// every descriptor is non-blocking and epoll_wait has a zero timeout.

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// rawSplice moves up to n bytes from in to out, non-blocking.
func rawSplice(in, out, n int) (int, error) {
	k, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(in), 0, uintptr(out), 0, uintptr(n),
		unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
	if e != 0 {
		return 0, e
	}
	return int(k), nil
}

// rawShutdownWrite half-closes a socket.
func rawShutdownWrite(fd int) error {
	_, _, e := unix.RawSyscall(unix.SYS_SHUTDOWN, uintptr(fd), unix.SHUT_WR, 0)
	return errnoErr(e)
}

// rawClose is close(2).
func rawClose(fd int) error {
	_, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
	return errnoErr(e)
}

// rawEpollCtl is epoll_ctl(2).
func rawEpollCtl(ep, op, fd int, ev *unix.EpollEvent) error {
	_, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(ep), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0)
	return errnoErr(e)
}

// rawEpollWait takes the ready events without waiting.
func rawEpollWait(ep int, evs []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(unsafe.SliceData(evs))), uintptr(len(evs)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
