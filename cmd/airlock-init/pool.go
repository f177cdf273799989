package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Shims are started ahead of time: a static Go binary takes ~4 ms to start
// here, the whole budget of a command round trip. An idle shim waits on its
// control socket (fd 3) for a command: its spec and its stdio fds
// (SCM_RIGHTS). The same socket then carries the shim's status lines.

const poolSize = 2

type idleShim struct {
	pid int
	ctl *os.File // PID 1's end of the shim's control socket
}

// spawnShim starts an idle shim in its own session.
func (a *agent) spawnShim() (*idleShim, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, err
	}
	attr := &syscall.ProcAttr{Files: []uintptr{null.Fd(), null.Fd(), null.Fd(), uintptr(fds[1])},
		Sys: &syscall.SysProcAttr{Setsid: true}}
	a.forkMu.Lock()
	pid, err := syscall.ForkExec("/proc/self/exe", []string{shimName}, attr)
	if err == nil {
		a.idle[pid] = true
	}
	a.forkMu.Unlock()
	null.Close()
	unix.Close(fds[1])
	if err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("start a supervisor: %w", err)
	}
	_ = unix.SetNonblock(fds[0], true) // pollable: status reads park no thread
	return &idleShim{pid: pid, ctl: os.NewFile(uintptr(fds[0]), "shim-ctl")}, nil
}

// takeShim returns an idle shim, started now if none is waiting.
func (a *agent) takeShim() (*idleShim, error) {
	defer a.refill()
	select {
	case s := <-a.pool:
		return s, nil
	default:
		return a.spawnShim()
	}
}

func (a *agent) refill() {
	select {
	case a.refillCh <- struct{}{}:
	default:
	}
}

// poolLoop keeps poolSize idle shims ready.
func (a *agent) poolLoop() {
	for range a.refillCh {
		for len(a.pool) < cap(a.pool) {
			s, err := a.spawnShim()
			if err != nil {
				logf("pre-start a supervisor: %v", err)
				time.Sleep(time.Second)
				break
			}
			a.pool <- s
		}
	}
}

// sendSpec hands a shim its command: a length, the stdio fds, the JSON.
func sendSpec(ctl *os.File, js []byte, fds []int) error {
	raw, err := ctl.SyscallConn()
	if err != nil {
		return err
	}
	hdr := binary.BigEndian.AppendUint32(nil, uint32(len(js)))
	var serr error
	if err := raw.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), hdr, unix.UnixRights(fds...), nil, 0)
		return !errors.Is(serr, unix.EAGAIN)
	}); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	_, err = ctl.Write(js)
	return err
}

// recvSpec is the shim's side: it blocks until PID 1 sends a command.
func recvSpec(ctl *os.File) ([]byte, []int, error) {
	hdr := make([]byte, 4)
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := unix.Recvmsg(int(ctl.Fd()), hdr, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("recvmsg: %w", err)
	}
	if n == 0 {
		return nil, nil, io.EOF
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, nil, fmt.Errorf("no fds with the spec: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 3 {
		return nil, nil, fmt.Errorf("want 3 fds with the spec, got %d: %v", len(fds), err)
	}
	if n < 4 {
		if _, err := io.ReadFull(ctl, hdr[n:]); err != nil {
			return nil, nil, err
		}
	}
	size := binary.BigEndian.Uint32(hdr)
	if size > 4<<20 {
		return nil, nil, fmt.Errorf("spec of %d bytes", size)
	}
	js := make([]byte, size)
	if _, err := io.ReadFull(ctl, js); err != nil {
		return nil, nil, err
	}
	return js, fds, nil
}
