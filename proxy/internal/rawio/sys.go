package rawio

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Raw system calls for non-blocking descriptors (sockets and pipes are
// O_NONBLOCK, epoll_wait has a zero timeout), used by the relay and by
// Socket. They are made as raw system calls: without the scheduler's entersyscall and
// exitsyscall, a call the kernel spends a while in (a loopback write
// delivers to the receiving socket in the writer's context) does not have
// sysmon hand the relay's P to another thread. Each returns a count that
// is never negative and an error that is nil or a unix.Errno.

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func Read(fd int, b []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func Write(fd int, b []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func Splice(in, out, n int) (int, error) {
	k, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(in), 0, uintptr(out), 0, uintptr(n),
		unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
	if e != 0 {
		return 0, e
	}
	return int(k), nil
}

func ShutdownWrite(fd int) error {
	_, _, e := unix.RawSyscall(unix.SYS_SHUTDOWN, uintptr(fd), unix.SHUT_WR, 0)
	return errnoErr(e)
}

func Close(fd int) error {
	_, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
	return errnoErr(e)
}

func EpollCtl(ep, op, fd int, ev *unix.EpollEvent) error {
	_, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(ep), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0)
	return errnoErr(e)
}

// EpollWait takes the ready events without waiting.
func EpollWait(ep int, evs []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(unsafe.SliceData(evs))), uintptr(len(evs)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
