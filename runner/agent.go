package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"airlock/audit"
	"airlock/internal/agentwire"
	"airlock/internal/safefile"
	"airlock/runner/agent"
)

// Agent is the in-sandbox agent's API as the runner uses it
// (*agent.Client; tests use a fake).
type Agent interface {
	Exec(ctx context.Context, req agentwire.Request, s agent.Streams, started func(agentwire.Started)) (*agentwire.Exit, error)
	Attach(ctx context.Context, id string, s agent.Streams, started func(agentwire.Started)) (*agentwire.Exit, error)
	Do(ctx context.Context, req agentwire.Request) (*agentwire.Result, error)
	ReadFile(ctx context.Context, path string, max int64, dst io.Writer) (*agentwire.FileInfo, error)
	List(ctx context.Context, path string, max int) ([]agentwire.FileInfo, error)
	WriteFile(ctx context.Context, path string, mode uint32, size, max int64, src io.Reader) (*agentwire.FileInfo, error)
	Close() error
}

// Proc is a command the agent knows; FileInfo a path in a sandbox.
type (
	Proc     = agentwire.Proc
	FileInfo = agentwire.FileInfo
)

// FindAgentBinary returns the airlock-init beside the running executable
// (bin/airlockd, which airlock serve runs as, and bin/airlock-init from
// make build), or "".
func FindAgentBinary() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(exe), AgentName)
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return p
	}
	return ""
}

// installAgent copies the agent binary to StateDir/agent/<sha256>/, a
// directory nobody but root can change; content-addressed, so running
// sandboxes keep the binary they started with. It is there twice:
// airlock-init (0755), which runs as PID 1, and airlock-init-shim, the
// same bytes execute-only (0711) and owned by root, an id the sandbox's
// user namespace does not map. No sandbox process can read the shim, so
// the kernel makes every command supervisor exec'd from it non-dumpable
// from its first instruction, its memory owned by the initial user
// namespace: no sandbox process, root with CAP_SYS_PTRACE included, can
// ptrace a supervisor or read its memory at any moment of its life, not
// even in the instant before it sets PR_SET_DUMPABLE itself — a supervisor
// is reused from command to command, so this is what keeps one command
// from reaching the next one's (TestSupervisorsCannotBeTraced). PID 1
// stays readable: Podman itself enters the sandbox through PID 1's
// namespaces, which a process owned by the initial user namespace would
// refuse it.
func (r *Runner) installAgent() error {
	if r.cfg.NoAgent {
		return nil
	}
	src := r.cfg.AgentBinary
	if src == "" {
		if src = FindAgentBinary(); src == "" {
			r.log.Info("no airlock-init beside the executable: commands go through the engine's exec (run make build)")
			return nil
		}
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("runner: agent binary: %w", err)
	}
	sum := sha256.Sum256(b)
	dir := filepath.Join(r.cfg.StateDir, "agent", hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("runner: agent dir: %w", err)
	}
	_ = os.Chmod(filepath.Dir(dir), 0o755)
	_ = os.Chmod(dir, 0o755)
	for _, f := range []struct {
		name string
		mode os.FileMode
	}{{AgentName, 0o755}, {agentwire.ShimName, 0o711}} {
		dst := filepath.Join(dir, f.name)
		if have, err := os.ReadFile(dst); err != nil || sha256.Sum256(have) != sum {
			if err := safefile.WriteAtomic(dst, b, f.mode); err != nil {
				return fmt.Errorf("runner: install agent: %w", err)
			}
		}
		if err := os.Chmod(dst, f.mode); err != nil { // an older install
			return fmt.Errorf("runner: install agent: %w", err)
		}
	}
	r.agentDir = dir
	return nil
}

func (r *Runner) dial(pid int) (Agent, error) {
	if r.cfg.DialAgent != nil {
		return r.cfg.DialAgent(pid)
	}
	c, err := agent.New(pid)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// connectAgent dials the agent of a sandbox whose spec runs it, retrying
// while it starts; when it cannot, commands fall back to the engine and
// the sandbox says why.
func (r *Runner) connectAgent(ctx context.Context, sb *sandbox, labels map[string]string) {
	if labels[LabelAgent] != AgentName {
		r.update(sb, func(i *Sandbox) { i.Agent = PodmanExecName; i.AgentError = "the sandbox was created without the agent" })
		return
	}
	var last error
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(10 * time.Millisecond) {
		c, err := r.cfg.Engine.Inspect(ctx, sb.info.ContainerID)
		if err != nil {
			last = err
			continue
		}
		a, err := r.dial(c.Pid)
		if err == nil {
			r.update(sb, func(i *Sandbox) { i.Agent, i.AgentError = AgentName, "" })
			r.mu.Lock()
			sb.agent, sb.initPid = a, c.Pid
			r.mu.Unlock()
			return
		}
		last = err
		if errors.Is(err, agent.ErrPeer) {
			break // someone else holds the name: never retry into it
		}
	}
	r.log.Warn("the sandbox's agent does not answer: commands go through the engine's exec", "sandbox", sb.info.ID, "err", last)
	r.update(sb, func(i *Sandbox) { i.Agent, i.AgentError = PodmanExecName, fmt.Sprint(last) })
}

// agentOf returns the sandbox's agent, or nil.
func (r *Runner) agentOf(id string) Agent {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sb, ok := r.sandboxes[id]; ok {
		return sb.agent
	}
	return nil
}

// needAgent returns the running sandbox's agent or ErrUnsupported.
func (r *Runner) needAgent(id, what string) (Sandbox, Agent, error) {
	sb, err := r.running(id)
	if err != nil {
		return sb, nil, err
	}
	a := r.agentOf(id)
	if a == nil {
		return sb, nil, fmt.Errorf("%s in %s needs the in-sandbox agent, and this sandbox has none (%s): %w",
			what, id, cmpOr(sb.AgentError, "it runs commands through "+PodmanExecName), ErrUnsupported)
	}
	return sb, a, nil
}

// agentErr maps the agent's answer codes to the runner's sentinels.
func agentErr(err error) error {
	var re *agent.RemoteError
	if !errors.As(err, &re) {
		if errors.Is(err, agentwire.ErrInvalid) {
			return fmt.Errorf("%w: %w", err, ErrInvalid)
		}
		return err
	}
	switch re.Code {
	case agentwire.CodeNotFound:
		return fmt.Errorf("%w: %w", err, ErrNotFound)
	case agentwire.CodeInvalid, agentwire.CodeExists, agentwire.CodeTooLarge, agentwire.CodeDenied:
		return fmt.Errorf("%w: %w", err, ErrInvalid)
	case agentwire.CodeUnsupported:
		return fmt.Errorf("%w: %w", err, ErrUnsupported)
	}
	return err
}

func (r *Runner) maxFile() int64 { return cmpOr(r.cfg.MaxFileBytes, DefaultMaxFileBytes) }

// ReadFile streams a regular file of the sandbox to w (at most
// Config.MaxFileBytes). Paths resolve inside the sandbox.
func (r *Runner) ReadFile(ctx context.Context, id, path string, w io.Writer) (FileInfo, error) {
	_, a, err := r.needAgent(id, "reading a file")
	if err != nil {
		return FileInfo{}, err
	}
	fi, err := a.ReadFile(ctx, path, r.maxFile(), w)
	if err != nil {
		return FileInfo{}, fmt.Errorf("read %s in %s: %w", path, id, agentErr(err))
	}
	return *fi, nil
}

// WriteFile writes size bytes from src to path atomically (a temporary
// file renamed over it); mode 0 is 0644.
func (r *Runner) WriteFile(ctx context.Context, id, path string, mode uint32, size int64, src io.Reader) (FileInfo, error) {
	sb, a, err := r.needAgent(id, "writing a file")
	if err != nil {
		return FileInfo{}, err
	}
	if size < 0 {
		return FileInfo{}, fmt.Errorf("write %s in %s: negative size %d: %w", path, id, size, ErrInvalid)
	}
	if size > r.maxFile() {
		return FileInfo{}, fmt.Errorf("write %s in %s: %d bytes, over the limit of %d: %w", path, id, size, r.maxFile(), ErrInvalid)
	}
	fi, err := a.WriteFile(ctx, path, mode, size, r.maxFile(), src)
	if err != nil {
		return FileInfo{}, fmt.Errorf("write %s in %s: %w", path, id, agentErr(err))
	}
	r.filesChanged(ctx, sb, audit.FileChange{Path: path, Op: "written", Size: size})
	if fi == nil {
		return FileInfo{Name: filepath.Base(path), Size: size}, nil
	}
	return *fi, nil
}

// FileOp runs a files request without data: list, stat, remove, mkdir.
func (r *Runner) FileOp(ctx context.Context, id string, req agentwire.Request) (*agentwire.Result, error) {
	switch req.Op {
	case agentwire.OpList, agentwire.OpStat, agentwire.OpRemove, agentwire.OpMkdir:
	default:
		return nil, fmt.Errorf("file op %q: want list, stat, remove or mkdir: %w", req.Op, ErrInvalid)
	}
	sb, a, err := r.needAgent(id, "the files API")
	if err != nil {
		return nil, err
	}
	if req.Op == agentwire.OpList {
		fs, err := a.List(ctx, req.Path, int(req.Max))
		if err != nil {
			return nil, fmt.Errorf("list %s in %s: %w", req.Path, id, agentErr(err))
		}
		return &agentwire.Result{Files: fs}, nil
	}
	res, err := a.Do(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("%s %s in %s: %w", req.Op, req.Path, id, agentErr(err))
	}
	switch req.Op {
	case agentwire.OpRemove:
		r.filesChanged(ctx, sb, audit.FileChange{Path: req.Path, Op: "deleted"})
	case agentwire.OpMkdir:
		r.filesChanged(ctx, sb, audit.FileChange{Path: req.Path, Op: "added"})
	}
	return res, nil
}

// filesChanged records a change made through the files API (WriteFile,
// FileOp, CopyIn): a lifecycle "files" record naming the principal.
func (r *Runner) filesChanged(ctx context.Context, sb Sandbox, c audit.FileChange) {
	r.emitLifecycle(sb, "files", c.Op+" "+c.Path, []audit.FileChange{c}, audit.PrincipalFrom(ctx))
}

// Processes lists the commands the sandbox's agent knows (running, and
// finished ones not yet recorded).
func (r *Runner) Processes(ctx context.Context, id string) ([]Proc, error) {
	_, a, err := r.needAgent(id, "listing processes")
	if err != nil {
		return nil, err
	}
	res, err := a.Do(ctx, agentwire.Request{Op: agentwire.OpPs})
	if err != nil {
		return nil, fmt.Errorf("ps in %s: %w", id, agentErr(err))
	}
	return res.Procs, nil
}

// Signal delivers sig (TERM, SIGTERM or a number) to a command's main
// process (its process group, for a command without a terminal).
func (r *Runner) Signal(ctx context.Context, id, execID, sig string) error {
	_, a, err := r.needAgent(id, "signalling a command")
	if err != nil {
		return err
	}
	if _, err := a.Do(ctx, agentwire.Request{Op: agentwire.OpSignal, ID: execID, Signal: sig}); err != nil {
		return fmt.Errorf("signal %s in %s: %w", execID, id, agentErr(err))
	}
	return nil
}

// Kill ends a command and everything it spawned (TERM, grace, KILL).
func (r *Runner) Kill(ctx context.Context, id, execID string) error {
	_, a, err := r.needAgent(id, "killing a command")
	if err != nil {
		return err
	}
	if _, err := a.Do(ctx, agentwire.Request{Op: agentwire.OpKill, ID: execID}); err != nil {
		return fmt.Errorf("kill %s in %s: %w", execID, id, agentErr(err))
	}
	return nil
}

// SockQuery names a sandbox socket for SockOwner.
type SockQuery struct {
	Proto  string         // tcp | udp
	Local  netip.AddrPort // the sandbox's end
	Remote netip.AddrPort // what it connected or sent to (invalid: unknown)
	At     time.Time      // when its traffic was seen (zero: no inference)
}

// SockOwner maps a sandbox socket to the process and command holding it,
// for attributing flows and queries. When the socket is gone, the agent
// names the only command that ran at q.At, marked Inferred.
func (r *Runner) SockOwner(ctx context.Context, id string, q SockQuery) (agentwire.SockOwner, error) {
	_, a, err := r.needAgent(id, "socket attribution")
	if err != nil {
		return agentwire.SockOwner{}, err
	}
	req := agentwire.Request{Op: agentwire.OpSockOwner, Proto: q.Proto, Port: int(q.Local.Port())}
	if q.Local.Addr().IsValid() && q.Remote.IsValid() {
		req.Local, req.Remote = q.Local.Addr().String(), q.Remote.String()
	}
	if !q.At.IsZero() {
		req.AtNS = q.At.UnixNano()
	}
	res, err := a.Do(ctx, req)
	if err != nil {
		return agentwire.SockOwner{}, fmt.Errorf("sockowner %s/%d in %s: %w", q.Proto, q.Local.Port(), id, agentErr(err))
	}
	if res.Sock == nil {
		return agentwire.SockOwner{}, fmt.Errorf("sockowner %s/%d in %s: the agent answered without a socket", q.Proto, q.Local.Port(), id)
	}
	if err := res.Sock.Check(); err != nil {
		return agentwire.SockOwner{}, fmt.Errorf("sockowner %s/%d in %s: %w", q.Proto, q.Local.Port(), id, err)
	}
	return *res.Sock, nil
}

// Attach streams a command's kept output and then its live output until it
// ends (the result) or ctx ends (detached: the command goes on, Running).
func (r *Runner) Attach(ctx context.Context, id, execID string, req ExecRequest) (ExecResult, error) {
	_, a, err := r.needAgent(id, "attaching to a command")
	if err != nil {
		return ExecResult{}, err
	}
	res := ExecResult{ID: execID, Agent: AgentName}
	exit, err := a.Attach(ctx, execID, agent.Streams{Stdin: req.Stdin, Stdout: orDiscard(req.Stdout), Stderr: orDiscard(req.Stderr), Resize: req.Resize},
		func(st agentwire.Started) { res.Pid = st.Pid })
	if err != nil {
		return res, fmt.Errorf("attach %s in %s: %w", execID, id, agentErr(err))
	}
	if exit == nil {
		res.Running = true
		return res, nil
	}
	fillExit(&res, exit)
	return res, nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func fillExit(res *ExecResult, e *agentwire.Exit) {
	// Killed as through the engine: ended by the runner, at its timeout or
	// on request.
	res.ExitCode, res.Signal, res.TimedOut, res.Killed = e.Code, e.Signal, e.TimedOut, e.Killed || e.TimedOut
	res.Limit = LimitOf(e.TimedOut, e.Signal)
	if sig, err := agentwire.ParseSignal(e.Signal); err == nil {
		res.ExitCode = 128 + int(sig) // as a shell reports it (and podman exec: 137)
	}
	res.Duration = time.Duration(e.DurationNS)
	res.Reaped, res.UtimeUS, res.StimeUS, res.MaxRSSKB = e.Reaped, e.Rusage.UtimeUS, e.Rusage.StimeUS, e.Rusage.MaxRSSKB
	res.StdoutBytes, res.StderrBytes = e.Stdout, e.Stderr
}
