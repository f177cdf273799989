package runner

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"airlock/audit"
	"airlock/internal/agentwire"
	"airlock/runner/agent"
)

// execMeta is what an exec record repeats in each of its events.
type execMeta struct {
	sandbox, id string
	argv        []string
	cwd, user   string
	background  bool
	tty         bool
	record      string // the shell record's artifact name
	principal   string // who ran it (ExecRequest.Principal)
}

// execAgent runs a command through the sandbox's agent: requested,
// started (with its pid) and finished (exit or signal, rusage, byte
// counts, redacted heads and tails) events; a background command's
// finished event comes from a follower when it ends.
func (r *Runner) execAgent(ctx context.Context, sb Sandbox, a Agent, req ExecRequest, res ExecResult, cwd string) (ExecResult, error) {
	argv := req.Argv
	if req.Shell != "" {
		argv = []string{"/bin/sh", "-c", req.Shell}
	}
	m := execMeta{sandbox: sb.ID, id: res.ID, argv: argv, cwd: cwd, user: req.User, background: req.Background, tty: req.TTY,
		principal: req.Principal}
	res.Agent, res.Background = AgentName, req.Background
	rec, err := r.shellRecord(&m, &req)
	if err != nil {
		return res, err
	}
	defer func() { rec.finish(res.ExitCode) }()
	r.agentEvent(m, "requested", nil, nil, "")
	timeout := cmpOr(req.Timeout, sb.ExecTimeout)
	if (req.Background || req.TTY) && req.Timeout == 0 {
		timeout = 0 // a background command or a terminal session runs until it ends, is killed, or the sandbox ends
	}
	areq := agentwire.Request{ID: res.ID, Argv: req.Argv, Shell: req.Shell, Env: envList(req.Env), Cwd: cwd,
		User: req.User, TTY: req.TTY, Rows: req.Rows, Cols: req.Cols, TimeoutMS: timeout.Milliseconds(),
		Background: req.Background}
	max := cmpOr(req.MaxCapture, DefaultMaxCapture)
	stdout, stderr := &capture{max: max}, &capture{max: max}
	out := newOutputRecord()
	s := agent.Streams{Stdin: req.Stdin, Resize: req.Resize,
		Stdout: io.MultiWriter(stdout, out.stdout, &discardErr{w: req.Stdout}),
		Stderr: io.MultiWriter(stderr, out.stderr, &discardErr{w: req.Stderr})}
	if req.Background {
		s.Stdout, s.Stderr = nil, nil
	}
	start := time.Now()
	exit, err := a.Exec(ctx, areq, s, func(st agentwire.Started) {
		res.Pid = st.Pid
		r.agentEvent(m, "started", &res, nil, "")
	})
	res.Duration = time.Since(start)
	if err != nil {
		res.ExitCode = -1
		if res.Pid == 0 { // never started: the request was refused
			r.agentEvent(m, "finished", &res, nil, "agent: "+err.Error())
			return res, fmt.Errorf("exec in %s: %w", sb.ID, agentErr(err))
		}
		r.agentEvent(m, "finished", &res, out, "agent: "+err.Error())
		return res, fmt.Errorf("exec in %s: %w", sb.ID, agentErr(err))
	}
	if req.Background {
		res.Running = true
		r.busy(sb.ID, 1) // until its follower sees it end
		go r.follow(m, a)
		return res, nil
	}
	fillExit(&res, exit)
	res.Stdout, res.StdoutTruncated = stdout.result()
	res.Stderr, res.StderrTruncated = stderr.result()
	r.agentEvent(m, "finished", &res, out, exit.StartError)
	go r.forget(a, res.ID) // off the caller's path; if it fails the record is recovered after a restart
	return res, nil
}

// follow waits for a background (or, after a restart, an adopted)
// command to end, attached so the record gets its output, then writes its
// finished event and lets the agent forget it.
func (r *Runner) follow(m execMeta, a Agent) {
	defer r.busy(m.sandbox, -1)
	out := newOutputRecord()
	var exit *agentwire.Exit
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		exit, err = a.Attach(context.Background(), m.id, agent.Streams{Stdout: out.stdout, Stderr: out.stderr}, nil)
		if err == nil && exit != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	res := ExecResult{ID: m.id, Agent: AgentName, Background: m.background, ExitCode: -1}
	if err != nil || exit == nil {
		r.agentEvent(m, "finished", &res, out, fmt.Sprintf("lost the command (the sandbox ended, or its agent): %v", err))
		return
	}
	fillExit(&res, exit)
	r.agentEvent(m, "finished", &res, out, exit.StartError)
	r.forget(a, m.id)
}

// forget tells the agent the record is stored; a failure leaves it there,
// to be recovered after a restart.
func (r *Runner) forget(a Agent, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = a.Do(ctx, agentwire.Request{Op: agentwire.OpForget, ID: id})
}

// recoverExecs follows every command an adopted sandbox's agent still
// knows: the finished event of each is written when it ends (at once for
// those that ended while no appliance ran), marked recovered.
func (r *Runner) recoverExecs(ctx context.Context, sb Sandbox, a Agent) {
	res, err := a.Do(ctx, agentwire.Request{Op: agentwire.OpPs})
	if err != nil {
		r.log.Warn("list the commands of an adopted sandbox", "sandbox", sb.ID, "err", err)
		return
	}
	for _, p := range res.Procs {
		m := execMeta{sandbox: sb.ID, id: p.ID, argv: p.Argv, cwd: p.Cwd, user: p.User, tty: p.TTY, background: true}
		go r.followRecovered(m, a)
	}
}

func (r *Runner) followRecovered(m execMeta, a Agent) {
	r.recovering.Store(m.id, true)
	r.busy(m.sandbox, 1)
	r.follow(m, a)
}

// agentEvent emits one event of an exec record.
func (r *Runner) agentEvent(m execMeta, stage string, res *ExecResult, out *outputRecord, reason string) {
	secrets := r.secrets(m.sandbox)
	e := audit.New(audit.KindExec, m.sandbox)
	e.ID, e.Reason = m.id, reason
	argv, n := redactAll(m.argv, secrets)
	x := &audit.Exec{Stage: stage, Argv: argv, Cwd: m.cwd, Agent: AgentName, User: m.user,
		Background: m.background, TTY: m.tty, Redactions: n, Principal: m.principal}
	if _, ok := r.recovering.Load(m.id); ok && stage == "finished" {
		x.Recovered = true
		r.recovering.Delete(m.id)
	}
	if res != nil {
		x.Pid = res.Pid
	}
	if res != nil && stage == "finished" {
		code := res.ExitCode
		x.ExitCode = &code
		x.DurationMS = res.Duration.Milliseconds()
		x.TimedOut, x.Killed, x.Signal, x.Reaped, x.Limit = res.TimedOut, res.Killed, res.Signal, res.Reaped, res.Limit
		x.UtimeUS, x.StimeUS, x.MaxRSSKB = res.UtimeUS, res.StimeUS, res.MaxRSSKB
		x.StdoutBytes, x.StderrBytes = res.StdoutBytes, res.StderrBytes
	}
	if out != nil {
		var k int
		x.StdoutHead, x.StdoutTail, k = out.stdout.render(secrets)
		x.Redactions += k
		x.StderrHead, x.StderrTail, k = out.stderr.render(secrets)
		x.Redactions += k
	}
	x.Record = m.record
	e.Exec = x
	r.cfg.Emitter.Emit(e)
}

func (r *Runner) secrets(sandbox string) []string {
	if r.cfg.SecretValues == nil {
		return nil
	}
	var out []string
	for _, s := range r.cfg.SecretValues(sandbox) {
		if len(s) >= minSecretLen {
			out = append(out, s)
		}
	}
	// Longest first, so a secret containing another is replaced whole.
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// minSecretLen: shorter values would redact ordinary output.
const minSecretLen = 4

// Redacted replaces a secret value in exec records.
const Redacted = "[REDACTED]"

func redact(s string, secrets []string) (string, int) {
	n := 0
	for _, v := range secrets {
		if c := strings.Count(s, v); c > 0 {
			n += c
			s = strings.ReplaceAll(s, v, Redacted)
		}
	}
	return s, n
}

func redactAll(ss []string, secrets []string) ([]string, int) {
	out := slices.Clone(ss)
	n := 0
	for i, s := range out {
		var k int
		out[i], k = redact(s, secrets)
		n += k
	}
	return out, n
}

// outputRecord keeps the head and tail of each stream for the record.
type outputRecord struct{ stdout, stderr *headTail }

func newOutputRecord() *outputRecord {
	return &outputRecord{stdout: &headTail{max: EventOutputMax}, stderr: &headTail{max: EventOutputMax}}
}

// headTail keeps the first and the last max bytes of a stream, each with
// a margin, so that a secret cut by a window's edge is still found whole
// before the margin is cut off.
type headTail struct {
	max   int
	head  []byte
	tail  []byte
	total int64
}

const tailMargin = 256

func (h *headTail) Write(p []byte) (int, error) {
	n := len(p)
	h.total += int64(n)
	keep := h.max + tailMargin
	if room := keep - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	if len(p) >= keep {
		h.tail = append(h.tail[:0], p[len(p)-keep:]...)
	} else {
		h.tail = append(h.tail, p...)
		if over := len(h.tail) - keep; over > 0 {
			h.tail = append(h.tail[:0], h.tail[over:]...)
		}
	}
	return n, nil
}

// render returns the head and tail with secrets redacted, and how many.
// Output of at most twice max comes back whole, as the head.
func (h *headTail) render(secrets []string) (string, string, int) {
	if h.total == int64(len(h.head)+len(h.tail)) { // contiguous
		whole, n := redact(string(h.head)+string(h.tail), secrets)
		if len(whole) <= 2*h.max {
			return whole, "", n
		}
		return whole[:h.max], whole[len(whole)-h.max:], n
	}
	head, n := redact(string(h.head), secrets)
	tail, k := redact(string(h.tail), secrets)
	return head[:min(len(head), h.max)], tail[max(0, len(tail)-h.max):], n + k
}
