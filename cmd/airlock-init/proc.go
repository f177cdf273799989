package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/agentwire"
)

const (
	replayMax   = 512 << 10 // the output a command keeps for re-attaching
	maxBuffered = 4 << 20   // read after the drain deadline: more than a pipe holds (pipe-max-size, 1 MiB)
)

type chunk struct {
	t agentwire.Type
	b []byte
}

// proc is one command: its supervisor (the shim), its main process and its
// output, kept in memory only as a bounded replay buffer.
type proc struct {
	a     *agent
	info  agentwire.Proc // Pid, Exit set under mu
	grace time.Duration

	supPid    int
	shim      *idleShim
	stdin     io.WriteCloser // nil: none
	ptmx      *os.File       // TTY master
	outs      []*os.File     // output read ends
	setpgid   bool
	started   chan struct{} // closed when the shim reported the pid or failed
	startErr  string
	startCode int

	mu        sync.Mutex
	subs      []*conn
	replay    []chunk
	replayN   int
	nOut      int64
	nErr      int64
	exit      *agentwire.Exit
	shimExit  *unix.WaitStatus
	shimDone  bool // the shim reported the command tree gone (it may be reused)
	timedOut  bool
	killed    bool
	termSent  bool
	reaped    int
	done      chan struct{}
	timer     *time.Timer
	exited    chan *shimExit
	statusEOF chan struct{} // the shim closed its status pipe: it ended
	begin     time.Time
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// emit records output and sends it to every attached connection; a
// connection that fails is detached. A slow connection slows the command
// (its pipe fills): memory stays bounded either way.
func (p *proc) emit(t agentwire.Type, b []byte) {
	cp := append([]byte(nil), b...)
	p.mu.Lock()
	if t == agentwire.TStderr {
		p.nErr += int64(len(b))
	} else {
		p.nOut += int64(len(b))
	}
	p.replay = append(p.replay, chunk{t, cp})
	p.replayN += len(cp)
	for p.replayN > replayMax && len(p.replay) > 1 {
		p.replayN -= len(p.replay[0].b)
		p.replay = p.replay[1:]
	}
	subs := append([]*conn(nil), p.subs...)
	p.mu.Unlock()
	for _, s := range subs {
		if err := s.send(t, cp); err != nil {
			p.unsub(s)
		}
	}
}

func (p *proc) unsub(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, s := range p.subs {
		if s == c {
			p.subs = append(p.subs[:i], p.subs[i+1:]...)
			return
		}
	}
}

// readOutput copies one stream into frames until EOF (or EIO for a PTY).
func (p *proc) readOutput(f *os.File, t agentwire.Type, wg *sync.WaitGroup) {
	defer wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			p.emit(t, buf[:n])
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			p.readBuffered(f, t, buf)
			return
		}
		if err != nil {
			return
		}
	}
}

// readBuffered emits what the pipe still holds, without waiting for more.
// The drain deadline (supervise) ends the wait for EOF, but a Read after
// it returns at once, even with the command's last output in the pipe
// (this reader was held up, e.g. by a host reading slowly). Bounded: a
// background child may go on writing.
func (p *proc) readBuffered(f *os.File, t agentwire.Type, buf []byte) {
	if f.SetReadDeadline(time.Time{}) != nil {
		return
	}
	raw, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Read(func(fd uintptr) bool {
		for total := 0; total < maxBuffered; {
			n, err := unix.Read(int(fd), buf)
			if n <= 0 || err != nil {
				break // EAGAIN: empty; EOF; EIO: a PTY's other end closed
			}
			p.emit(t, buf[:n])
			total += n
		}
		return true // never wait for readiness
	})
}

// shimMsg is one line the shim writes on its status pipe.
type shimMsg struct {
	Pid        int       `json:"pid,omitempty"`
	StartError string    `json:"start_error,omitempty"`
	Code       int       `json:"code,omitempty"`
	Exit       *shimExit `json:"exit,omitempty"`
	Reaped     int       `json:"reaped,omitempty"`
	Done       bool      `json:"done,omitempty"`
}

type shimExit struct {
	Code   int              `json:"code"`
	Signal int              `json:"signal,omitempty"`
	Rusage agentwire.Rusage `json:"rusage"`
}

// readStatus follows the shim's status pipe: the pid, then the main
// process's exit, then how many descendants it had to kill.
func (p *proc) readStatus(s *idleShim, exited chan<- *shimExit) {
	defer close(p.statusEOF)
	sc := bufio.NewScanner(io.LimitReader(s.ctl, 1<<20))
	var sent bool
	startedOnce := sync.OnceFunc(func() { close(p.started) })
	defer startedOnce()
	done := false
	for !done && sc.Scan() {
		var m shimMsg
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		switch {
		case m.Pid > 0:
			p.mu.Lock()
			p.info.Pid = m.Pid
			p.mu.Unlock()
			startedOnce()
		case m.StartError != "":
			p.startErr, p.startCode = m.StartError, m.Code
			startedOnce()
		case m.Exit != nil && !sent:
			sent = true
			exited <- m.Exit
		case m.Reaped > 0:
			p.mu.Lock()
			p.reaped += m.Reaped
			if p.exit != nil {
				p.exit.Reaped = p.reaped
			}
			p.mu.Unlock()
		case m.Done:
			done = true
		}
	}
	if !sent {
		exited <- nil // the shim ended without a status: killed from inside?
	}
	if !done {
		s.ctl.Close() // the shim died
		return
	}
	// From here no kill can reach this shim for this command (terminate
	// checks shimDone under the same lock), so it may run the next one.
	p.mu.Lock()
	p.shimDone = true
	p.mu.Unlock()
	p.a.release(s)
}

// supervise waits for the main process's status and the output to drain,
// then records the exit.
func (p *proc) supervise(exited <-chan *shimExit) {
	var wg sync.WaitGroup
	for i, f := range p.outs {
		t := agentwire.TStdout
		if i == 1 {
			t = agentwire.TStderr
		}
		wg.Add(1)
		go p.readOutput(f, t, &wg)
	}
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	st := <-exited
	// Background children may hold the pipes open: drain briefly, then stop.
	select {
	case <-drained:
	case <-time.After(drainTimeout):
		for _, f := range p.outs {
			_ = f.SetReadDeadline(time.Now())
		}
		<-drained
	}
	for _, f := range p.outs {
		_ = f.Close()
	}
	// Ended by a kill or timeout: the shim reports what it had to kill
	// once nothing is left; wait for that (bounded) so the exit counts it.
	p.mu.Lock()
	killing := p.termSent
	p.mu.Unlock()
	if killing {
		select {
		case <-p.statusEOF:
		case <-time.After(p.grace + 5*time.Second):
		}
	}
	p.finish(st)
}

func (p *proc) finish(st *shimExit) {
	now := time.Now()
	p.mu.Lock()
	e := &agentwire.Exit{FinishedNS: now.UnixNano(), DurationNS: now.Sub(p.begin).Nanoseconds(),
		TimedOut: p.timedOut, Killed: p.killed, Stdout: p.nOut, Stderr: p.nErr, Reaped: p.reaped}
	switch {
	case st == nil && p.startErr != "":
		e.Code, e.StartError = p.startCode, p.startErr
	case st == nil:
		e.Code = -1
		e.StartError = "the command's supervisor ended without reporting a status (killed from inside the sandbox?)"
	case st.Signal != 0:
		e.Code, e.Signal = -1, agentwire.SignalName(syscall.Signal(st.Signal))
		e.Rusage = st.Rusage
	default:
		e.Code, e.Rusage = st.Code, st.Rusage
	}
	p.exit = e
	p.info.Exit = e
	p.subs = nil
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	if p.stdin != nil {
		_ = p.stdin.Close()
	}
	if p.ptmx != nil {
		_ = p.ptmx.Close()
	}
	close(p.done)
	p.a.evictFinished()
}

// supervisorExited is called by the reaper for the shim's pid.
func (p *proc) supervisorExited(ws unix.WaitStatus) {
	p.mu.Lock()
	p.shimExit = &ws
	p.mu.Unlock()
}

// terminate asks the shim to end the whole tree (TERM, grace, KILL).
func (p *proc) terminate() {
	<-p.started
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shimExit != nil || p.shimDone || p.shim == nil {
		return
	}
	p.termSent = true
	// Written under p.mu: before the shim can be released to another command.
	_ = p.shim.sendCtl(ctlMsg{Op: ctlKill, ID: p.info.ID}, nil)
}

func (p *proc) snapshot() agentwire.Proc {
	p.mu.Lock()
	defer p.mu.Unlock()
	info := p.info
	info.Running = p.exit == nil
	return info
}

// wait blocks until the command ended.
func (a *agent) wait(id string) (*agentwire.Result, error) {
	p, err := a.lookup(id)
	if err != nil {
		return nil, err
	}
	<-p.done
	return &agentwire.Result{Exit: p.snapshot().Exit}, nil
}

func (a *agent) lookup(id string) (*proc, error) {
	a.forkMu.Lock()
	defer a.forkMu.Unlock()
	p := a.procs[id]
	if p == nil {
		return nil, errorf(agentwire.CodeNotFound, "no command %q", id)
	}
	return p, nil
}

func (a *agent) signal(id, name string) error {
	sig, err := agentwire.ParseSignal(name)
	if err != nil {
		return err
	}
	p, err := a.lookup(id)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exit != nil || p.info.Pid <= 0 {
		return errorf(agentwire.CodeNotFound, "command %q is not running", id)
	}
	target := p.info.Pid
	if p.setpgid {
		target = -target
	}
	if err := unix.Kill(target, sig); err != nil {
		return errorf(agentwire.CodeInternal, "signal %s to %s: %v", name, id, err)
	}
	return nil
}

func (a *agent) kill(id string) error {
	p, err := a.lookup(id)
	if err != nil {
		return err
	}
	p.mu.Lock()
	ended := p.shimExit != nil || p.shimDone
	if !ended {
		p.killed = p.killed || p.exit == nil
	}
	p.mu.Unlock()
	if !ended {
		p.terminate()
	}
	return nil
}

func (a *agent) ps() []agentwire.Proc {
	a.forkMu.Lock()
	ps := make([]*proc, 0, len(a.order))
	for _, id := range a.order {
		ps = append(ps, a.procs[id])
	}
	a.forkMu.Unlock()
	out := make([]agentwire.Proc, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.snapshot())
	}
	return out
}

func (a *agent) forget(id string) error {
	p, err := a.lookup(id)
	if err != nil {
		return err
	}
	if p.running() {
		return errorf(agentwire.CodeInvalid, "command %q is still running", id)
	}
	a.hist.add(spanOf(p.snapshot()))
	a.forkMu.Lock()
	defer a.forkMu.Unlock()
	a.drop(id)
	return nil
}

func (a *agent) drop(id string) {
	delete(a.procs, id)
	for i, x := range a.order {
		if x == id {
			a.order = append(a.order[:i], a.order[i+1:]...)
			break
		}
	}
}

// evictFinished keeps at most maxFinished finished commands (oldest go).
func (a *agent) evictFinished() {
	a.forkMu.Lock()
	defer a.forkMu.Unlock()
	var finished []string
	for _, id := range a.order {
		if !a.procs[id].running() {
			finished = append(finished, id)
		}
	}
	for len(finished) > maxFinished {
		a.drop(finished[0])
		finished = finished[1:]
	}
}

var errDuplicate = errors.New("duplicate")

func dupErr(id string) error {
	return &opError{code: agentwire.CodeExists, err: fmt.Errorf("command id %q is in use: %w", id, errDuplicate)}
}
