package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/agentwire"
)

// shimMain supervises commands one at a time: it is a child subreaper, so
// every process a command spawns (setsid, double fork) stays below it. It
// takes commands from PID 1 over its control socket (fd 3) and reports on
// it (JSON lines): the command's pid, its exit status and rusage, how many
// descendants it had to kill, and "done" once none is left. Then it waits
// for the next command: a supervisor is reused, so its start-up is paid
// once, not per command. Ending a command's tree is a "kill" message that
// names the command, so a late kill can never reach the next one; signals
// are ignored (TERM only ends an idle supervisor).
func shimMain(args []string) int {
	status := os.NewFile(3, "status")
	syscall.CloseOnExec(3)
	if len(args) != 0 {
		fmt.Fprintln(os.Stderr, "airlock-init-shim: run by airlock-init only")
		return 2
	}
	var wmu sync.Mutex
	report := func(m shimMsg) {
		b, _ := json.Marshal(m)
		wmu.Lock()
		defer wmu.Unlock()
		_, _ = status.Write(append(b, '\n'))
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "airlock-init-shim: prctl(PR_SET_CHILD_SUBREAPER):", err)
		return 2
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs)
	msgs := make(chan ctlMsg)
	go func() {
		defer close(msgs)
		for {
			m, err := recvCtl(status)
			if err != nil {
				if !errors.Is(err, io.EOF) {
					fmt.Fprintln(os.Stderr, "airlock-init-shim:", err)
				}
				return
			}
			msgs <- m
		}
	}()
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				return 0 // PID 1 closed the socket: not needed any more
			}
			if m.Op == ctlRun {
				runOne(m, msgs, sigs, report)
				report(shimMsg{Done: true})
			} // a kill for a command already ended: nothing to do
		case sig := <-sigs:
			if sig == syscall.SIGTERM {
				return 0 // idle: PID 1's shutdown
			}
		}
	}
}

// runOne runs one command until it and everything it spawned are gone.
func runOne(m ctlMsg, msgs <-chan ctlMsg, sigs <-chan os.Signal, report func(shimMsg)) {
	s, fds := m.Spec, m.fds
	closeFds := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if s == nil || len(s.Argv) == 0 || len(fds) != 3 {
		closeFds()
		report(shimMsg{StartError: "bad command from PID 1", Code: 126})
		return
	}
	path, code, err := lookPath(s.Argv[0], s.Env, s.Cwd)
	if err != nil {
		closeFds()
		report(shimMsg{StartError: err.Error(), Code: code})
		return
	}
	attr := &syscall.ProcAttr{Dir: s.Cwd, Env: s.Env, Files: []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])},
		Sys: &syscall.SysProcAttr{Setpgid: s.Setpgid && !s.TTY, Setsid: s.TTY, Setctty: s.TTY, Ctty: 0,
			Credential: &syscall.Credential{Uid: s.UID, Gid: s.GID, Groups: s.Groups}}}
	pid, err := syscall.ForkExec(path, s.Argv, attr)
	closeFds() // the command has them; the pipes end with it
	if err != nil {
		code := 126
		if errors.Is(err, syscall.ENOENT) {
			code = 127
		}
		report(shimMsg{StartError: fmt.Sprintf("start %s (cwd %s): %v", s.Argv[0], s.Cwd, err), Code: code})
		return
	}
	report(shimMsg{Pid: pid})
	reaped := make(chan struct{})
	go reapAll(pid, report, reaped)
	killed := make(chan struct{})
	killing := false
	for {
		select {
		case <-reaped:
			if killing {
				<-killed // its count is the last report
			}
			return
		case k, ok := <-msgs:
			if !ok {
				msgs = nil // PID 1 is gone; the command goes on until the sandbox ends
				continue
			}
			if k.Op == ctlKill && k.ID == m.ID && !killing {
				killing = true
				go func() {
					report(shimMsg{Reaped: killTree(time.Duration(s.GraceMS) * time.Millisecond)})
					close(killed)
				}()
			}
		case <-sigs: // ignored while a command runs
		}
	}
}

// reapAll waits for every child, reports the main one, and returns when
// none is left.
func reapAll(main int, report func(shimMsg), done chan<- struct{}) {
	defer close(done)
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		pid, err := unix.Wait4(-1, &ws, 0, &ru)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return // ECHILD: nothing left
		}
		if pid != main {
			continue
		}
		e := &shimExit{Rusage: agentwire.Rusage{UtimeUS: ru.Utime.Nano() / 1000, StimeUS: ru.Stime.Nano() / 1000, MaxRSSKB: ru.Maxrss}}
		if ws.Signaled() {
			e.Signal = int(ws.Signal())
		} else {
			e.Code = ws.ExitStatus()
		}
		report(shimMsg{Exit: e})
	}
}

// killTree TERMs every descendant, waits up to grace for them to go, then
// STOPs and KILLs whatever is left until nothing is. It returns how many
// processes it signalled.
func killTree(grace time.Duration) int {
	self := os.Getpid()
	seen := map[int]bool{}
	for _, p := range descendants(self) {
		seen[p] = true
		_ = unix.Kill(p, unix.SIGTERM)
		_ = unix.Kill(p, unix.SIGCONT)
	}
	for end := time.Now().Add(grace); time.Now().Before(end) && len(descendants(self)) > 0; {
		time.Sleep(10 * time.Millisecond)
	}
	for i := 0; ; i++ {
		left := descendants(self)
		if len(left) == 0 {
			return len(seen)
		}
		for _, p := range left {
			seen[p] = true
			_ = unix.Kill(p, unix.SIGSTOP) // a fork bomb cannot fork while stopped
		}
		for _, p := range left {
			_ = unix.Kill(p, unix.SIGKILL)
		}
		time.Sleep(time.Duration(min(i+1, 20)) * time.Millisecond)
	}
}

// descendants lists the live (not zombie) processes below pid, from /proc.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, state := statOf(p); pp > 0 && state != 'Z' {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// statOf reads a process's parent and state from /proc/PID/stat.
func statOf(pid int) (int, byte) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0
	}
	n, _ := strconv.Atoi(f[1])
	return n, f[0][0]
}

// lookPath finds argv0 as a shell would, on the command's own PATH. The
// code is the shell's: 127 not found, 126 found but not executable.
func lookPath(argv0 string, env []string, cwd string) (string, int, error) {
	if strings.Contains(argv0, "/") {
		p := argv0
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		return p, 0, nil
	}
	pathVar := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	found := ""
	for _, dir := range filepath.SplitList(pathVar) {
		if dir == "" {
			dir = "."
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(cwd, dir)
		}
		p := filepath.Join(dir, argv0)
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		if st.Mode()&0o111 != 0 {
			return p, 0, nil
		}
		found = p
	}
	if found != "" {
		return "", 126, fmt.Errorf("%s: permission denied", found)
	}
	return "", 127, fmt.Errorf("%s: command not found in PATH %s", argv0, pathVar)
}
