package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/agentwire"
)

// agent is PID 1's state.
type agent struct {
	overflowUID int
	root        int // O_PATH fd of "/", the root every file op resolves in
	env         []string
	shim        string // the supervisors' binary (shimBinary)
	devNull     int    // /dev/null, every command's stdin when it has none (-1: opened per command)

	// forkMu is held across ForkExec and registering the child, so an exit
	// reaped before registration is still routed to its command.
	forkMu   sync.Mutex
	bySup    map[int]*proc // supervisor (shim) pid -> command
	idle     map[int]bool  // pre-started shims waiting for a command
	pool     chan *idleShim
	refillCh chan struct{}
	procs    map[string]*proc
	order    []string // command ids in start order, for ps and eviction
	orphans  atomic.Int64
	hist     history // forgotten commands' spans, for attribution

	shutting    atomic.Bool
	refused     atomic.Int64
	lastRefused atomic.Value // string
	logMu       sync.Mutex
	logTokens   int       // refused-peer log lines allowed now (takeLogToken)
	logAt       time.Time // when logTokens was last brought up to date
}

// Limits of the agent itself.
const (
	maxFinished  = 1000     // finished commands kept until forgotten
	hardMaxFile  = 1 << 30  // no read or write beyond this, whatever the host asks
	defaultMax   = 64 << 20 // when the request gives no bound
	maxListing   = 100000
	drainTimeout = 100 * time.Millisecond
)

func newAgent() (*agent, error) {
	a := &agent{overflowUID: 65534, bySup: map[int]*proc{}, procs: map[string]*proc{}, env: os.Environ(),
		idle: map[int]bool{}, pool: make(chan *idleShim, poolSize), refillCh: make(chan struct{}, 1)}
	a.devNull = -1
	if fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		a.devNull = fd
	}
	if b, err := os.ReadFile("/proc/sys/kernel/overflowuid"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			a.overflowUID = n
		}
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /: %w", err)
	}
	a.root = fd
	if a.shim, err = shimBinary(); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return a, nil
}

// shimBinary is airlock-init-shim beside this binary (as a path through
// an fd held open to it), the copy of it the
// runner installs execute-only and owned by an id the sandbox does not
// map, so that a supervisor is non-dumpable from its exec on and no
// sandbox process can ever trace it (runner.installAgent). Without it PID
// 1 does not start: a supervisor started from PID 1's own, readable binary
// could be traced before its first prctl. One the sandbox can read (a
// runtime whose root is the host's) is used with a warning.
func shimBinary() (string, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return "", fmt.Errorf("find this binary: %w", err)
	}
	p := filepath.Join(filepath.Dir(exe), shimName)
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("no executable %s beside %s (the runner installs it): %v", shimName, exe, err)
	}
	if f, err := os.Open(p); err == nil {
		f.Close()
		logf("%s is readable in the sandbox: a sandbox process could trace a supervisor as it starts", p)
	}
	// Held open (O_PATH needs no read permission) and exec'd through
	// /proc/self/fd: a mount over the path later cannot swap the binary.
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", p, err)
	}
	return "/proc/self/fd/" + strconv.Itoa(fd), nil
}

func (a *agent) run() {
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs) // every signal: a Go PID 1 without handlers dies of an in-sandbox kill -HUP 1
	ln, err := net.Listen("unix", agentwire.SocketName)
	if err != nil {
		fatal("listen on %s: %v", agentwire.SocketName, err)
	}
	go a.serve(ln.(*net.UnixListener))
	go a.poolLoop()
	a.refill()
	tick := time.NewTicker(time.Second)
	for {
		select {
		case s := <-sigs:
			switch s {
			case syscall.SIGCHLD:
				a.reap()
			case syscall.SIGURG: // the Go runtime's preemption
			case syscall.SIGTERM, syscall.SIGINT:
				logf("%v: shutting down", s)
				a.shutdown()
			default:
				logf("ignored signal %v", s)
			}
		case <-tick.C:
			a.reap()
		}
	}
}

// reap collects every exited child. PID 1 is the only caller of wait4.
func (a *agent) reap() {
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, &ru)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		a.forkMu.Lock()
		p := a.bySup[pid]
		delete(a.bySup, pid)
		idle := a.idle[pid]
		delete(a.idle, pid)
		a.forkMu.Unlock()
		if idle {
			continue // a pre-started shim that ended (it is replaced when taken)
		}
		if p == nil {
			a.orphans.Add(1)
			continue
		}
		p.supervisorExited(ws)
	}
}

// shutdown ends every process of the sandbox and then PID 1: TERM to all,
// up to 2 s of reaping, KILL to what is left.
func (a *agent) shutdown() {
	a.shutting.Store(true)
	for drained := false; !drained; {
		select {
		case s := <-a.pool:
			s.ctl.Close()
		default:
			drained = true
		}
	}
	_ = unix.Kill(-1, unix.SIGTERM)
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		a.reap()
		if _, err := unix.Wait4(-1, nil, unix.WNOHANG, nil); errors.Is(err, unix.ECHILD) {
			os.Exit(0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = unix.Kill(-1, unix.SIGKILL)
	os.Exit(0)
}

func (a *agent) serve(ln *net.UnixListener) {
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			logf("accept: %v", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if why := a.checkPeer(c); why != "" {
			a.refuse(why)
			_ = c.Close()
			continue
		}
		go a.handleConn(c)
	}
}

// checkPeer accepts only a peer from outside the sandbox's user namespace:
// the appliance (host root entering this netns) shows as pid 0 and the
// overflow uid. Every process of the sandbox, root or not, nested
// namespaces included, has a pid here.
func (a *agent) checkPeer(c *net.UnixConn) string {
	raw, err := c.SyscallConn()
	if err != nil {
		return "no raw conn: " + err.Error()
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		cerr = err
	}
	if cerr != nil {
		return "SO_PEERCRED: " + cerr.Error()
	}
	if cred.Pid != 0 || int(cred.Uid) != a.overflowUID {
		return fmt.Sprintf("pid %d uid %d gid %d", cred.Pid, cred.Uid, cred.Gid)
	}
	return ""
}

// refuse counts and logs a refused peer, at most ~10 lines a second.
func (a *agent) refuse(who string) {
	n := a.refused.Add(1)
	a.lastRefused.Store(who)
	if a.takeLogToken() {
		logf("refused a peer from inside the sandbox (%s): only the appliance may use this socket (%d refused so far)", who, n)
	}
}

// takeLogToken allows a burst of 10 log lines, then one per 100 ms. The
// bucket is refilled from the time since the last line, when one is
// asked for: a ticker would wake every sandbox's PID 1 ten times a second.
func (a *agent) takeLogToken() bool {
	a.logMu.Lock()
	defer a.logMu.Unlock()
	now := time.Now()
	if a.logAt.IsZero() {
		a.logTokens, a.logAt = logBurst, now
	}
	if n := int(now.Sub(a.logAt) / logEvery); n > 0 {
		a.logTokens = min(logBurst, a.logTokens+n)
		a.logAt = a.logAt.Add(time.Duration(n) * logEvery)
	}
	if a.logTokens == logBurst {
		a.logAt = now // a full bucket: the next token is due a period after this line
	}
	if a.logTokens == 0 {
		return false
	}
	a.logTokens--
	return true
}

const (
	logBurst = 10
	logEvery = 100 * time.Millisecond
)

func (a *agent) status() *agentwire.Status {
	s := &agentwire.Status{Refused: a.refused.Load(), Orphans: a.orphans.Load()}
	if v, ok := a.lastRefused.Load().(string); ok {
		s.LastRefused = v
	}
	a.forkMu.Lock()
	for _, p := range a.procs {
		if p.running() {
			s.Running++
		}
	}
	a.forkMu.Unlock()
	return s
}
