package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"airlock/internal/agentwire"
)

// sockOwner maps a local (proto, port) of the sandbox's netns to the
// socket's inode and uid (/proc/net/{tcp,udp}{,6}), then to the process
// holding it (/proc/PID/fd) and the command it descends from. A process
// of another uid cannot be read (its fd links need ptrace access): the
// answer then has the uid but no pid.
func (a *agent) sockOwner(req *agentwire.Request) (*agentwire.Result, error) {
	inode, uid, ok := findSocket(req.Proto, req.Port)
	if !ok {
		return nil, errorf(agentwire.CodeNotFound, "no %s socket on local port %d", req.Proto, req.Port)
	}
	s := &agentwire.SockOwner{Inode: inode, UID: uid}
	if pid := pidOfSocket(inode); pid > 0 {
		s.Pid = pid
		s.ExecID = a.execOf(pid)
	}
	return &agentwire.Result{Sock: s}, nil
}

func findSocket(proto string, port int) (uint64, int, bool) {
	for _, f := range []string{"/proc/net/" + proto, "/proc/net/" + proto + "6"} {
		if inode, uid, ok := scanNet(f, port); ok {
			return inode, uid, true
		}
	}
	return 0, 0, false
}

// scanNet finds the first entry of a /proc/net table whose local port is
// port and that has an inode.
func scanNet(file string, port int) (uint64, int, bool) {
	f, err := os.Open(file)
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 10 {
			continue
		}
		_, hexPort, ok := strings.Cut(fl[1], ":")
		if !ok {
			continue
		}
		if p, err := strconv.ParseUint(hexPort, 16, 16); err != nil || int(p) != port {
			continue
		}
		inode, err := strconv.ParseUint(fl[9], 10, 64)
		if err != nil || inode == 0 {
			continue
		}
		uid, _ := strconv.Atoi(fl[7])
		return inode, uid, true
	}
	return 0, 0, false
}

func pidOfSocket(inode uint64) int {
	want := "socket:[" + strconv.FormatUint(inode, 10) + "]"
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 {
			continue
		}
		dir := "/proc/" + e.Name() + "/fd/"
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue // exited, or another uid's
		}
		for _, fd := range fds {
			if l, err := os.Readlink(dir + fd.Name()); err == nil && l == want {
				return pid
			}
		}
	}
	return 0
}

// execOf walks pid's ancestors up to a command's shim.
func (a *agent) execOf(pid int) string {
	for range 1000 {
		a.forkMu.Lock()
		p := a.bySup[pid]
		a.forkMu.Unlock()
		if p != nil {
			return p.info.ID
		}
		pp, _ := statOf(pid)
		if pp <= 1 {
			return ""
		}
		pid = pp
	}
	return ""
}
