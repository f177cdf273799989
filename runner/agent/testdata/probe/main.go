// Command probe runs inside a test sandbox and tries to use the agent's
// socket the ways a sandbox process could. It prints one verdict line:
// "served" (the agent answered a request), "refused: ..." or "error: ...".
//
//	probe connect          connect as is and send a ps request
//	probe setuid           setuid(65534) first (uid alone must not pass)
//	probe userns           re-run "connect" in a nested user+pid namespace
//	probe netns            re-run "connect" in a nested user+net namespace
//	probe squat            bind the socket name (PID 1 holds it: EADDRINUSE)
//	probe steal            take PID 1's fds (pidfd_getfd, /proc/1/fd) and use them
//	probe trace            ptrace every supervisor (airlock-init-shim), idle or
//	                       running this probe, and read the supervisors' binary
package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const name = "@airlock-agent"

func main() {
	if len(os.Args) < 2 {
		fmt.Println("error: no mode")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "connect":
		fmt.Println(try(func() (net.Conn, error) { return net.Dial("unix", name) }))
	case "setuid":
		if err := syscall.Setuid(65534); err != nil {
			fmt.Println("error: setuid:", err)
			return
		}
		fmt.Println(try(func() (net.Conn, error) { return net.Dial("unix", name) }))
	case "userns":
		cmd := exec.Command("/proc/self/exe", "connect")
		// No id maps (writing one is refused in the sandbox): the child is
		// the overflow uid inside its new namespaces, as an attacker would be.
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID}
		out, err := cmd.CombinedOutput()
		if err != nil {
			fmt.Printf("error: nested namespace: %v %s\n", err, out)
			return
		}
		fmt.Print(string(out))
	case "netns":
		// A nested user+net namespace: the abstract name is per netns, so
		// the agent's socket is not even there.
		cmd := exec.Command("/proc/self/exe", "connect")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET}
		out, err := cmd.CombinedOutput()
		if err != nil {
			fmt.Printf("error: nested namespace: %v %s\n", err, out)
			return
		}
		fmt.Print(string(out))
	case "squat":
		l, err := net.Listen("unix", name)
		if err != nil {
			fmt.Println("refused: bind:", err)
			return
		}
		l.Close()
		fmt.Println("served: bound the agent's name")
	case "steal":
		fmt.Println(steal())
	case "trace":
		fmt.Println(trace())
	default:
		fmt.Println("error: unknown mode")
	}
}

// try connects and sends a version-1 ps request; only a result frame back
// counts as served.
func try(dial func() (net.Conn, error)) string {
	c, err := dial()
	if err != nil {
		return "refused: connect: " + err.Error()
	}
	defer c.Close()
	return use(c)
}

func use(c net.Conn) string {
	req := []byte(`{"v":1,"op":"ps"}`)
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(req)+1))
	frame = append(append(frame, 1), req...)
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write(frame); err != nil {
		return "refused: write: " + err.Error()
	}
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return "refused: read: " + err.Error()
	}
	return fmt.Sprintf("served: frame type %d", hdr[4])
}

// steal tries to get PID 1's listening socket: pidfd_getfd on each of its
// fds, then opening /proc/1/fd/N. PID 1 is not dumpable, so both must fail.
func steal() string {
	pidfd, err := unix.PidfdOpen(1, 0)
	if err != nil {
		return "error: pidfd_open(1): " + err.Error()
	}
	var errs []string
	for fd := 0; fd < 32; fd++ {
		got, err := unix.PidfdGetfd(pidfd, fd, 0)
		if err != nil {
			if len(errs) == 0 {
				errs = append(errs, "pidfd_getfd: "+err.Error())
			}
			continue
		}
		f := os.NewFile(uintptr(got), "stolen")
		if c, err := net.FileConn(f); err == nil {
			c.Close()
			return "served: stole fd " + strconv.Itoa(fd) + " of PID 1"
		}
		if ln, err := net.FileListener(f); err == nil {
			ln.Close()
			return "served: stole PID 1's listener (fd " + strconv.Itoa(fd) + ")"
		}
	}
	for fd := 0; fd < 32; fd++ {
		if _, err := os.Readlink("/proc/1/fd/" + strconv.Itoa(fd)); err == nil {
			return "served: read /proc/1/fd/" + strconv.Itoa(fd)
		} else if len(errs) == 1 {
			errs = append(errs, "readlink /proc/1/fd: "+err.Error())
		}
	}
	if err := unix.PtraceSeize(1); err == nil {
		return "served: ptrace attached to PID 1"
	} else {
		errs = append(errs, "ptrace: "+err.Error())
	}
	return fmt.Sprintf("refused: %v", errs)
}

// trace tries to ptrace every supervisor in the sandbox (the idle ones a
// later command will run under, and this probe's own) and to read their
// binary. It is execute-only and owned by an id the sandbox does not map,
// so each supervisor is non-dumpable from its first instruction, its
// memory owned by the initial user namespace: no root, not even with
// CAP_SYS_PTRACE, can attach, at any moment of its life.
func trace() string {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline"); string(cmd) == "airlock-init-shim\x00" {
			pids = append(pids, pid)
		}
	}
	if len(pids) < 2 {
		return "error: fewer than two supervisors found"
	}
	var errs []string
	for _, pid := range pids {
		if err := unix.PtraceSeize(pid); err == nil {
			return "served: ptrace attached to supervisor " + strconv.Itoa(pid)
		} else if len(errs) == 0 {
			errs = append(errs, "ptrace: "+err.Error())
		}
		if _, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); err == nil {
			return "served: read /proc/" + strconv.Itoa(pid) + "/environ"
		}
	}
	if _, err := os.ReadFile("/.airlock/airlock-init-shim"); err == nil {
		return "served: read the supervisors' binary"
	} else {
		errs = append(errs, "read the binary: "+err.Error())
	}
	return fmt.Sprintf("refused: %d supervisors: %v", len(pids), errs)
}
