package main

import (
	"bufio"
	"net/netip"
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
	inode, uid, ok := findSocket(req)
	if !ok {
		if id := a.onlyCommandAt(req.AtNS); id != "" {
			return &agentwire.Result{Sock: &agentwire.SockOwner{ExecID: id, Inferred: true}}, nil
		}
		return nil, errorf(agentwire.CodeNotFound, "no %s socket on local port %d", req.Proto, req.Port)
	}
	s := &agentwire.SockOwner{Inode: inode, UID: uid}
	if pid := pidOfSocket(inode); pid > 0 {
		s.Pid = pid
		s.ExecID = a.execOf(pid)
		s.Comm = commOf(pid)
	}
	return &agentwire.Result{Sock: s}, nil
}

// findSocket looks the socket up by its four-tuple when the request gives
// it, else (or when that finds nothing) in the /proc/net tables.
func findSocket(req *agentwire.Request) (uint64, int, bool) {
	if req.Local != "" && req.Remote != "" {
		local, err1 := netip.ParseAddr(req.Local)
		remote, err2 := netip.ParseAddrPort(req.Remote)
		if err1 == nil && err2 == nil {
			if inode, uid, ok := diagLookup(req.Proto, netip.AddrPortFrom(local, uint16(req.Port)), remote); ok {
				return inode, uid, true
			}
		}
	}
	return scanTables(req.Proto, req.Port)
}

func commOf(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	// A process names itself: control bytes (which the host refuses)
	// become '?', so no name can make its traffic unattributable.
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, strings.TrimSuffix(string(b), "\n"))
}

func scanTables(proto string, port int) (uint64, int, bool) {
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
