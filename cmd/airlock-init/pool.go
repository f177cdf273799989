package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Shims are started ahead of time: a static Go binary takes ~4 ms to start
// here, the whole budget of a command round trip. An idle shim waits on its
// control socket (fd 3) for a command: its spec and its stdio fds
// (SCM_RIGHTS). The same socket then carries the shim's status lines.

const (
	poolSize = 4
	poolLow  = poolSize / 2 // refill below this many idle shims
)

type idleShim struct {
	pid int
	ctl *os.File // PID 1's end of the shim's control socket
	mu  sync.Mutex
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
	pid, err := syscall.ForkExec(a.shim, []string{shimName}, attr)
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

// takeShim returns an idle shim, started now if none is waiting. The pool
// is topped up only once it ran low: a shim comes back to it when its
// command is over (release), so sequential commands reuse the same few
// shims. Refilling after every take started a new Go process per command
// (the pool was then full when the used shim came back, which was told to
// exit): about a third of the sandbox's CPU during a loop of short execs.
func (a *agent) takeShim() (*idleShim, error) {
	select {
	case s := <-a.pool:
		if len(a.pool) < poolLow {
			a.refill()
		}
		return s, nil
	default:
		a.refill()
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
		for len(a.pool) < cap(a.pool) && !a.shutting.Load() {
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

// Control messages, PID 1 to a shim: u32 length, JSON; a run message
// carries the command's three stdio fds (SCM_RIGHTS).
const (
	ctlRun  = "run"
	ctlKill = "kill"
)

type ctlMsg struct {
	Op   string    `json:"op"`
	ID   string    `json:"id"`
	Spec *shimSpec `json:"spec,omitempty"`
	fds  []int
}

// sendCtl writes one control message (with fds for a run).
func (s *idleShim) sendCtl(m ctlMsg, fds []int) error {
	js, err := json.Marshal(m)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	raw, err := s.ctl.SyscallConn()
	if err != nil {
		return err
	}
	// One sendmsg for the length, the JSON and the fds: when the shim's
	// recvmsg takes the length (and the fds), the JSON is already there
	// for its next read.
	msg := append(binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(js)), uint32(len(js))), js...)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	var n int
	var serr error
	if err := raw.Write(func(fd uintptr) bool {
		n, serr = unix.SendmsgN(int(fd), msg, oob, nil, 0)
		return !errors.Is(serr, unix.EAGAIN)
	}); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	if n < len(msg) { // a full socket buffer took part of it: the rest follows
		_, err = s.ctl.Write(msg[n:])
	}
	return err
}

// recvCtl is the shim's side: one control message, with its fds if any.
func recvCtl(ctl *os.File) (ctlMsg, error) {
	hdr := make([]byte, 4)
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := unix.Recvmsg(int(ctl.Fd()), hdr, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return ctlMsg{}, fmt.Errorf("recvmsg: %w", err)
	}
	if n == 0 {
		return ctlMsg{}, io.EOF
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			return ctlMsg{}, fmt.Errorf("bad control data: %v", err)
		}
		if fds, err = unix.ParseUnixRights(&msgs[0]); err != nil {
			return ctlMsg{}, err
		}
	}
	if n < 4 {
		if _, err := io.ReadFull(ctl, hdr[n:]); err != nil {
			return ctlMsg{}, err
		}
	}
	size := binary.BigEndian.Uint32(hdr)
	if size > 4<<20 {
		return ctlMsg{}, fmt.Errorf("control message of %d bytes", size)
	}
	js := make([]byte, size)
	if _, err := io.ReadFull(ctl, js); err != nil {
		return ctlMsg{}, err
	}
	var m ctlMsg
	if err := json.Unmarshal(js, &m); err != nil {
		return ctlMsg{}, err
	}
	m.fds = fds
	return m, nil
}

// release takes back a shim whose command is over: into the pool, or,
// when the pool is full or the sandbox shuts down, told to exit (EOF).
func (a *agent) release(s *idleShim) {
	a.forkMu.Lock()
	delete(a.bySup, s.pid)
	a.idle[s.pid] = true
	a.forkMu.Unlock()
	if !a.shutting.Load() {
		select {
		case a.pool <- s:
			return
		default:
		}
	}
	s.ctl.Close()
}
