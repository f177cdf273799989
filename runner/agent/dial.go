// Package agent is the appliance's side of the channel to airlock-init, the
// agent running as PID 1 in a sandbox: it dials the agent's abstract socket
// from inside the sandbox's network namespace (entered through a pidfd of
// the container's PID 1, on a locked OS thread), checks that the listener
// is that very process, and speaks internal/agentwire over the connection.
// Root only.
package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"airlock/internal/agentwire"
)

// ErrPeer is wrapped when the listener is not the sandbox's PID 1.
var ErrPeer = errors.New("agent socket is not held by the sandbox's PID 1")

// ErrUnavailable is wrapped when no agent answers (not started yet, or the
// sandbox does not run one).
var ErrUnavailable = errors.New("no agent")

// target is the sandbox's PID 1 as a pidfd, opened once: every later step
// works from it, never from the pid number alone.
type target struct {
	pid   int
	pidfd int
	ino   uint64
}

func openTarget(pid int) (*target, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("agent: pid %d: %w", pid, ErrUnavailable)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("agent: pidfd_open(%d): %w", pid, err)
	}
	t := &target{pid: pid, pidfd: fd}
	fail := func(err error) (*target, error) { unix.Close(fd); return nil, err }
	if err := isNamespaceInit(pid); err != nil {
		return fail(err)
	}
	// Still alive after the status read: the status was this process's.
	if alive, err := pidfdAlive(fd); err != nil || !alive {
		return fail(fmt.Errorf("agent: pid %d exited: %w", pid, ErrUnavailable))
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail(fmt.Errorf("agent: fstat pidfd: %w", err))
	}
	t.ino = st.Ino
	return t, nil
}

func (t *target) close() { unix.Close(t.pidfd) }

// isNamespaceInit checks that pid is PID 1 of its own pid namespace.
func isNamespaceInit(pid int) error {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return fmt.Errorf("agent: %w: %w", err, ErrUnavailable)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
			f := strings.Fields(v)
			if len(f) < 2 || f[len(f)-1] != "1" {
				return fmt.Errorf("agent: pid %d is not a namespace's PID 1 (NSpid %q): %w", pid, strings.TrimSpace(v), ErrPeer)
			}
			return nil
		}
	}
	return fmt.Errorf("agent: pid %d: no NSpid in its status", pid)
}

func pidfdAlive(fd int) (bool, error) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	if err != nil {
		return false, err
	}
	return n == 0, nil
}

// socketInNetns creates an AF_UNIX socket in the target's network
// namespace. The thread that enters the namespace is locked, and if it
// cannot get back it is never unlocked: the runtime then ends it with its
// goroutine instead of reusing it for anything else.
func (t *target) socketInNetns() (int, error) {
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
			ch <- res{-1, fmt.Errorf("agent: open own netns: %w", err)}
			return
		}
		defer unix.Close(self)
		if err := unix.Setns(t.pidfd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- res{-1, fmt.Errorf("agent: enter the sandbox's netns: %w", err)}
			return
		}
		fd, serr := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
			if serr == nil {
				unix.Close(fd)
			}
			ch <- res{-1, fmt.Errorf("agent: return to the host netns: %w", err)} // thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		ch <- res{fd, serr}
	}()
	r := <-ch
	if r.err != nil {
		return -1, r.err
	}
	return r.fd, nil
}

// dial connects to the agent and checks the listener is the target.
func (t *target) dial() (*net.UnixConn, error) {
	fd, err := t.socketInNetns()
	if err != nil {
		return nil, err
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: agentwire.SocketName}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("agent: connect to %s in the sandbox of pid %d: %w: %w", agentwire.SocketName, t.pid, err, ErrUnavailable)
	}
	if err := t.checkPeer(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "agent")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return c.(*net.UnixConn), nil
}

// checkPeer: the listener's SO_PEERCRED pid is the target's, and its
// SO_PEERPIDFD names the same process as the target's pidfd (pidfs: one
// inode per process), so neither a squatter nor a reused pid passes.
func (t *target) checkPeer(fd int) error {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return fmt.Errorf("agent: SO_PEERCRED: %w", err)
	}
	if int(cred.Pid) != t.pid {
		return fmt.Errorf("agent: listener pid %d uid %d, want %d: %w", cred.Pid, cred.Uid, t.pid, ErrPeer)
	}
	pfd, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	if err != nil {
		return fmt.Errorf("agent: SO_PEERPIDFD: %w", err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return fmt.Errorf("agent: fstat peer pidfd: %w", err)
	}
	if st.Ino != t.ino {
		return fmt.Errorf("agent: listener is another process than pid %d (pidfd inode %d, want %d): %w", t.pid, st.Ino, t.ino, ErrPeer)
	}
	return nil
}
