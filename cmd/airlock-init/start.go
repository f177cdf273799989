package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/agentwire"
)

// shimSpec is what PID 1 tells the shim (its argv[1], JSON).
type shimSpec struct {
	Argv    []string `json:"argv"`
	Env     []string `json:"env"`
	Cwd     string   `json:"cwd"`
	UID     uint32   `json:"uid"`
	GID     uint32   `json:"gid"`
	Groups  []uint32 `json:"groups,omitempty"`
	Setpgid bool     `json:"setpgid"`
	TTY     bool     `json:"tty,omitempty"` // fd 0 is a terminal: the command gets its own session on it
	GraceMS int64    `json:"grace_ms"`
}

const defaultGrace = 2 * time.Second

// start launches req's command under a new shim and waits until the shim
// reported the command's pid (or that it could not start).
func (a *agent) start(req *agentwire.Request, first *conn) (*proc, error) {
	u, err := lookupUser(req.User)
	if err != nil {
		return nil, err
	}
	argv := req.Argv
	if req.Shell != "" {
		argv = []string{"/bin/sh", "-c", req.Shell}
	}
	spec := shimSpec{Argv: argv, Env: mergeEnv(a.env, req.Env, u), Cwd: cmpOr(req.Cwd, "/"),
		UID: u.uid, GID: u.gid, Groups: u.groups, Setpgid: !req.TTY, GraceMS: req.GraceMS}
	if spec.GraceMS == 0 {
		spec.GraceMS = defaultGrace.Milliseconds()
	}
	p := &proc{a: a, grace: time.Duration(spec.GraceMS) * time.Millisecond, setpgid: spec.Setpgid,
		started: make(chan struct{}), done: make(chan struct{}), statusEOF: make(chan struct{}), begin: time.Now(),
		info: agentwire.Proc{ID: req.ID, Argv: argv, Cwd: spec.Cwd, User: req.User, TTY: req.TTY,
			StartedNS: time.Now().UnixNano()}}
	if first != nil {
		p.subs = []*conn{first}
	}
	files, closeChild, err := p.stdio(req)
	if err != nil {
		return nil, err
	}
	spec.TTY = req.TTY
	childFds := []int{int(files[0]), int(files[1]), int(files[2])}
	var ctl *idleShim
	for attempt := 0; ; attempt++ {
		s, err := a.takeShim()
		if err != nil {
			closeChild()
			p.closeParent()
			return nil, errorf(agentwire.CodeInternal, "start the command's supervisor: %v", err)
		}
		a.forkMu.Lock()
		if a.procs[req.ID] != nil {
			a.forkMu.Unlock()
			closeChild()
			p.closeParent()
			select {
			case a.pool <- s: // unused: back to the pool
			default:
				_ = unix.Kill(s.pid, unix.SIGKILL)
				s.ctl.Close()
			}
			return nil, dupErr(req.ID)
		}
		delete(a.idle, s.pid)
		p.supPid, p.shim = s.pid, s
		a.bySup[s.pid] = p
		a.procs[req.ID] = p
		a.order = append(a.order, req.ID)
		a.forkMu.Unlock()
		err = s.sendCtl(ctlMsg{Op: ctlRun, ID: req.ID, Spec: &spec}, childFds)
		if err == nil {
			ctl = s
			break
		}
		// That shim died while idle (killed from inside?): try a fresh one.
		a.forkMu.Lock()
		delete(a.bySup, s.pid)
		a.drop(req.ID)
		a.forkMu.Unlock()
		_ = unix.Kill(s.pid, unix.SIGKILL)
		s.ctl.Close()
		if attempt == 2 {
			closeChild()
			p.closeParent()
			return nil, errorf(agentwire.CodeInternal, "hand the command to its supervisor: %v", err)
		}
	}
	closeChild()
	exited := make(chan *shimExit, 1)
	go p.readStatus(ctl, exited)
	<-p.started
	p.exited = exited
	if req.TimeoutMS > 0 {
		p.mu.Lock()
		p.timer = time.AfterFunc(time.Duration(req.TimeoutMS)*time.Millisecond, func() {
			p.mu.Lock()
			if p.exit == nil {
				p.timedOut = true
			}
			p.mu.Unlock()
			p.terminate()
		})
		p.mu.Unlock()
	}
	return p, nil
}

// stdio prepares the command's fds 0-2; closeChild closes PID 1's copies
// of the child's ends once it was forked.
func (p *proc) stdio(req *agentwire.Request) ([]uintptr, func(), error) {
	if req.TTY {
		master, slave, err := openPTY(req.Rows, req.Cols)
		if err != nil {
			return nil, nil, errorf(agentwire.CodeUnsupported, "pty: %v", err)
		}
		p.ptmx, p.stdin, p.outs = master, master, []*os.File{master}
		fd := slave.Fd()
		return []uintptr{fd, fd, fd}, func() { slave.Close() }, nil
	}
	// The child's ends stay plain blocking fds and PID 1's ends are
	// non-blocking files in Go's poller: os.Pipe registers both ends and
	// an *os.File's Fd() then sets the child's back to blocking, a dozen
	// syscalls a command. /dev/null is opened once (newAgent).
	var child []int
	fail := func(err error) ([]uintptr, func(), error) {
		for _, fd := range child {
			unix.Close(fd)
		}
		p.closeParent()
		return nil, nil, errorf(agentwire.CodeInternal, "pipes: %v", err)
	}
	in, shared := p.a.devNull, true
	if req.Stdin {
		w, r, err := pipe(false)
		if err != nil {
			return fail(err)
		}
		p.stdin, in, shared = w, r, false
	} else if in < 0 {
		fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(err)
		}
		in, shared = fd, false
	}
	if !shared {
		child = append(child, in)
	}
	var out [2]int
	for i := range out {
		r, w, err := pipe(true)
		if err != nil {
			return fail(err)
		}
		child = append(child, w)
		p.outs = append(p.outs, r)
		out[i] = w
	}
	fds := []uintptr{uintptr(in), uintptr(out[0]), uintptr(out[1])}
	return fds, func() {
		for _, fd := range child {
			unix.Close(fd)
		}
	}, nil
}

// pipe returns a pipe's end PID 1 keeps (the read end if parentReads, else
// the write end) as a non-blocking file in Go's poller, and the other end,
// for the child, as a plain blocking fd. Both are close-on-exec.
func pipe(parentReads bool) (*os.File, int, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, -1, err
	}
	mine, theirs := fds[0], fds[1]
	if !parentReads {
		mine, theirs = fds[1], fds[0]
	}
	if err := unix.SetNonblock(mine, true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, -1, err
	}
	return os.NewFile(uintptr(mine), "pipe"), theirs, nil
}

func (p *proc) closeParent() {
	if p.stdin != nil {
		p.stdin.Close()
	}
	for _, f := range p.outs {
		f.Close()
	}
}

// openPTY opens a pseudo-terminal pair sized rows x cols (0: 24 x 80).
func openPTY(rows, cols uint16) (*os.File, *os.File, error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		return nil, nil, fmt.Errorf("unlock: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		m.Close()
		return nil, nil, fmt.Errorf("pty number: %w", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	if err := setSize(m, rows, cols); err != nil {
		m.Close()
		s.Close()
		return nil, nil, err
	}
	return m, s, nil
}

func setSize(m *os.File, rows, cols uint16) error {
	ws := &unix.Winsize{Row: cmpOr(rows, 24), Col: cmpOr(cols, 80)}
	if err := unix.IoctlSetWinsize(int(m.Fd()), unix.TIOCSWINSZ, ws); err != nil {
		return fmt.Errorf("set window size: %w", err)
	}
	return nil
}

// mergeEnv is PID 1's environment (the container's) with extra on top;
// HOME follows a named user unless given.
func mergeEnv(base, extra []string, u user) []string {
	idx := map[string]int{}
	out := make([]string, 0, len(base)+len(extra)+1)
	set := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			return
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	for _, kv := range base {
		set(kv)
	}
	if u.home != "" {
		set("HOME=" + u.home)
	}
	for _, kv := range extra {
		set(kv)
	}
	return out
}

func cmpOr[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

// exec runs an exec request on c.
func (c *conn) exec(req *agentwire.Request) bool {
	var first *conn
	if !req.Background {
		first = c
	}
	p, err := c.a.start(req, first)
	if err != nil {
		if c.result(failResult(err)) != nil {
			return false
		}
		return req.Background || c.skipInput()
	}
	err = c.sendJSON(agentwire.TStarted, agentwire.Started{ID: req.ID, Pid: p.snapshot().Pid})
	p.launch() // output flows only after the started frame
	if err != nil {
		return false
	}
	if req.Background {
		return c.result(&agentwire.Result{}) == nil
	}
	return c.follow(p)
}

// skipInput reads the host's input frames after a failed exec, up to the
// frame that ends them (the host sends one after every foreground exec).
func (c *conn) skipInput() bool {
	for {
		t, _, err := c.r.Next()
		if err != nil {
			return false
		}
		switch t {
		case agentwire.TStdinEOF, agentwire.TDetach:
			return true
		case agentwire.TStdin, agentwire.TResize:
		default:
			return false
		}
	}
}

// attach streams a command's replay buffer and then its live output.
func (c *conn) attach(req *agentwire.Request) bool {
	p, err := c.a.lookup(req.ID)
	if err != nil {
		return c.result(failResult(err)) == nil && c.skipInput()
	}
	p.mu.Lock()
	c.mu.Lock()
	replay := append([]chunk(nil), p.replay...)
	if p.exit == nil {
		p.subs = append(p.subs, c)
	}
	p.mu.Unlock()
	werr := agentwire.WriteFrame(c.c, agentwire.TStarted, mustJSON(agentwire.Started{ID: p.info.ID, Pid: p.info.Pid}))
	for _, ch := range replay {
		if werr == nil {
			werr = agentwire.WriteFrame(c.c, ch.t, ch.b)
		}
	}
	c.mu.Unlock()
	if werr != nil {
		p.unsub(c)
		return false
	}
	return c.follow(p)
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// follow relays input to p until the process ends or the host detaches,
// then sends the Result; the host's input ends with stdin-eof or detach.
func (c *conn) follow(p *proc) bool {
	detached := make(chan struct{})
	inputDone := make(chan bool, 1)
	go func() { inputDone <- c.relayInput(p, detached) }()
	var res *agentwire.Result
	select {
	case <-p.done:
		res = &agentwire.Result{Exit: p.snapshot().Exit}
	case <-detached:
		p.unsub(c)
		res = &agentwire.Result{}
	}
	if c.result(res) != nil {
		return false
	}
	return <-inputDone
}

// relayInput handles stdin, resize and detach frames; true when the input
// ended in step (stdin-eof or detach).
func (c *conn) relayInput(p *proc, detached chan struct{}) bool {
	for {
		t, b, err := c.r.Next()
		if err != nil {
			p.unsub(c)
			if p.stdin != nil && p.ptmx == nil {
				p.stdin.Close()
			}
			close(detached)
			return false
		}
		switch t {
		case agentwire.TStdin:
			if p.stdin != nil {
				_, _ = p.stdin.Write(b) // a command that closed its stdin just loses it
			}
		case agentwire.TResize:
			var rs agentwire.Resize
			if agentwire.Decode(t, b, &rs) == nil && p.ptmx != nil {
				_ = setSize(p.ptmx, rs.Rows, rs.Cols)
			}
		case agentwire.TStdinEOF:
			if p.stdin != nil && p.ptmx == nil {
				p.stdin.Close()
			}
			return true
		case agentwire.TDetach:
			close(detached)
			return true
		default:
			p.unsub(c)
			close(detached)
			return false
		}
	}
}

// launch starts following the command's output and status.
func (p *proc) launch() {
	if p.startErr != "" {
		// Reported like a shell would: 127 not found, 126 not executable.
		p.emit(agentwire.TStderr, []byte(fmt.Sprintf("airlock-init: %s\n", p.startErr)))
	}
	go p.supervise(p.exited)
}
