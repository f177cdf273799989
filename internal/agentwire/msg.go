package agentwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"syscall"
)

// Operations.
const (
	OpExec      = "exec"      // start a command; streams output, then its Result unless Background
	OpAttach    = "attach"    // stream a running (or finished) command's output, then its Result
	OpWait      = "wait"      // the Result of a command once it ended
	OpSignal    = "signal"    // deliver Signal to a command's main process
	OpKill      = "kill"      // end a command and everything it spawned
	OpPs        = "ps"        // list the commands the agent knows
	OpForget    = "forget"    // drop a finished command's record (the host has stored it)
	OpRead      = "read"      // a file's contents as data frames
	OpWrite     = "write"     // write a file atomically from data frames
	OpList      = "list"      // a directory's entries
	OpStat      = "stat"      // one path
	OpRemove    = "remove"    // a file or (Recursive) a tree
	OpMkdir     = "mkdir"     // a directory (Parents: with its parents)
	OpSockOwner = "sockowner" // the process owning a local (Proto, Port)
	OpStatus    = "status"    // the agent's counters (refused peers, orphans)
)

// Bounds on a request.
const (
	MaxArgs      = 4096
	MaxArgBytes  = 128 << 10 // one argument or env entry (Linux MAX_ARG_STRLEN)
	MaxExecBytes = 1 << 20   // argv + env together
	MaxPath      = 4096
	MaxIDLen     = 64
	MaxTimeoutMS = 7 * 24 * 3600 * 1000
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid request")

// Request is the JSON payload of a TRequest frame. Fields apply to the ops
// named beside them; the others must be zero.
type Request struct {
	V  int    `json:"v"`
	Op string `json:"op"`
	ID string `json:"id,omitempty"` // exec, attach, wait, signal, kill, forget

	// exec
	Argv       []string `json:"argv,omitempty"`
	Shell      string   `json:"shell,omitempty"` // run by /bin/sh -c instead of Argv
	Env        []string `json:"env,omitempty"`   // KEY=VALUE added to the agent's environment
	Cwd        string   `json:"cwd,omitempty"`
	User       string   `json:"user,omitempty"` // name, uid or uid:gid, resolved in the sandbox
	Stdin      bool     `json:"stdin,omitempty"`
	TTY        bool     `json:"tty,omitempty"`
	Rows       uint16   `json:"rows,omitempty"`
	Cols       uint16   `json:"cols,omitempty"`
	TimeoutMS  int64    `json:"timeout_ms,omitempty"`
	GraceMS    int64    `json:"grace_ms,omitempty"`
	Background bool     `json:"background,omitempty"`

	Signal string `json:"signal,omitempty"` // signal: TERM, SIGTERM or a number

	// files
	Path      string `json:"path,omitempty"`
	Mode      uint32 `json:"mode,omitempty"` // write, mkdir: permission bits; 0: 0644 / 0755
	Size      int64  `json:"size,omitempty"` // write: exact byte count that follows
	Max       int64  `json:"max,omitempty"`  // read, write, list: the bound; 0: the agent's
	Recursive bool   `json:"recursive,omitempty"`
	Parents   bool   `json:"parents,omitempty"`

	// sockowner
	Proto string `json:"proto,omitempty"` // tcp | udp
	Port  int    `json:"port,omitempty"`  // the socket's local port
	// Local (the socket's address) and Remote (address:port it is
	// connected or sent to), when both are given, find the socket with one
	// exact lookup instead of a scan of the tables.
	Local  string `json:"local,omitempty"`
	Remote string `json:"remote,omitempty"`
	// AtNS is when the host saw the socket's traffic (unix ns): when the
	// socket is gone, the only command running then is named, Inferred.
	AtNS int64 `json:"at_ns,omitempty"`
}

// Started is the payload of a TStarted frame.
type Started struct {
	ID  string `json:"id"`
	Pid int    `json:"pid"` // in the sandbox's pid namespace
}

// Resize is the payload of a TResize frame.
type Resize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Rusage is what wait4 reported for a command's main process.
type Rusage struct {
	UtimeUS  int64 `json:"utime_us"`
	StimeUS  int64 `json:"stime_us"`
	MaxRSSKB int64 `json:"maxrss_kb"`
}

// Proc is one command the agent knows.
type Proc struct {
	ID        string   `json:"id"`
	Pid       int      `json:"pid"`
	Argv      []string `json:"argv"`
	Cwd       string   `json:"cwd,omitempty"`
	User      string   `json:"user,omitempty"`
	TTY       bool     `json:"tty,omitempty"`
	StartedNS int64    `json:"started_ns"`
	Running   bool     `json:"running"`
	Exit      *Exit    `json:"exit,omitempty"`
}

// Exit is how a command ended.
type Exit struct {
	Code       int    `json:"code"`             // -1 when Signal is set
	Signal     string `json:"signal,omitempty"` // the signal that ended it
	TimedOut   bool   `json:"timed_out,omitempty"`
	Killed     bool   `json:"killed,omitempty"`      // ended by OpKill
	Reaped     int    `json:"reaped,omitempty"`      // descendants killed at its end
	StartError string `json:"start_error,omitempty"` // exec failed: Code 126 or 127
	FinishedNS int64  `json:"finished_ns"`
	DurationNS int64  `json:"duration_ns"`
	Rusage     Rusage `json:"rusage"`
	Stdout     int64  `json:"stdout_bytes"`
	Stderr     int64  `json:"stderr_bytes"`
}

// FileInfo describes one path.
type FileInfo struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"` // permission bits
	Type    string `json:"type"` // file | dir | symlink | other
	ModNS   int64  `json:"mod_ns"`
	UID     int    `json:"uid"`
	GID     int    `json:"gid"`
	Symlink string `json:"symlink,omitempty"`
}

// SockOwner answers OpSockOwner.
type SockOwner struct {
	Inode  uint64 `json:"inode"`
	UID    int    `json:"uid"`
	Pid    int    `json:"pid,omitempty"`     // 0: not found (exited, or another uid's)
	ExecID string `json:"exec_id,omitempty"` // the command it descends from
	Comm   string `json:"comm,omitempty"`    // the process's name (/proc/PID/comm)
	// Inferred: the socket was gone; ExecID is the only command that ran
	// at Request.AtNS (Inode, UID and Pid are then 0).
	Inferred bool `json:"inferred,omitempty"`
}

// MaxComm bounds SockOwner.Comm (the kernel's is 16 bytes).
const MaxComm = 64

// Check validates an answer to OpSockOwner (from the agent: untrusted):
// the exec id is a command id or empty, the name short and printable.
func (s *SockOwner) Check() error {
	if s.ExecID != "" {
		if err := validID(s.ExecID); err != nil {
			return fmt.Errorf("sockowner: exec %w", err)
		}
	}
	if len(s.Comm) > MaxComm {
		return invalid("sockowner: comm of %d bytes, at most %d", len(s.Comm), MaxComm)
	}
	for i, c := range []byte(s.Comm) {
		if c < 0x20 || c == 0x7f {
			return invalid("sockowner: comm byte %d is a control byte (%#x)", i, c)
		}
	}
	if s.Pid < 0 {
		return invalid("sockowner: negative pid %d", s.Pid)
	}
	return nil
}

// Status answers OpStatus.
type Status struct {
	Refused     int64  `json:"refused"`      // peers refused on accept
	LastRefused string `json:"last_refused"` // "pid N uid U" of the last one
	Orphans     int64  `json:"orphans"`      // processes reaped that no command owned
	Running     int    `json:"running"`
}

// Result is the payload of the TResult frame that ends every request.
type Result struct {
	Error string `json:"error,omitempty"`
	// Code classifies Error: invalid, notfound, exists, denied, toolarge,
	// unsupported, internal.
	Code string `json:"code,omitempty"`

	Exit   *Exit      `json:"exit,omitempty"`
	Procs  []Proc     `json:"procs,omitempty"`
	File   *FileInfo  `json:"file,omitempty"`
	Files  []FileInfo `json:"files,omitempty"`
	Sock   *SockOwner `json:"sock,omitempty"`
	Status *Status    `json:"status,omitempty"`
	Bytes  int64      `json:"bytes,omitempty"` // read, write: bytes moved
}

// Error codes of a Result.
const (
	CodeInvalid     = "invalid"
	CodeNotFound    = "notfound"
	CodeExists      = "exists"
	CodeDenied      = "denied"
	CodeTooLarge    = "toolarge"
	CodeUnsupported = "unsupported"
	CodeInternal    = "internal"
)

// DecodeRequest decodes and validates a TRequest payload. Unknown fields,
// a wrong version and every out-of-bounds value are errors naming the field.
func DecodeRequest(p []byte) (*Request, error) {
	var r Request
	if err := decodeStrict(p, &r); err != nil {
		return nil, fmt.Errorf("request: %w: %w", err, ErrInvalid)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// DecodeResult decodes a TResult payload (from the agent: untrusted).
func DecodeResult(p []byte) (*Result, error) {
	var r Result
	if err := decodeStrict(p, &r); err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	return &r, nil
}

// Decode decodes a JSON payload of frame type t into v, strictly.
func Decode(t Type, p []byte, v any) error {
	if err := decodeStrict(p, v); err != nil {
		return fmt.Errorf("%s frame: %w", t, err)
	}
	return nil
}

func decodeStrict(p []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(p))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

func invalid(format string, a ...any) error {
	return fmt.Errorf(format+": %w", append(a, ErrInvalid)...)
}

// Validate checks a request's fields for its op.
func (r *Request) Validate() error {
	if r.V != Version {
		return invalid("request: protocol version %d, this agent speaks %d", r.V, Version)
	}
	switch r.Op {
	case OpExec:
		return r.validateExec()
	case OpAttach, OpWait, OpKill, OpForget:
		return validID(r.ID)
	case OpSignal:
		if err := validID(r.ID); err != nil {
			return err
		}
		_, err := ParseSignal(r.Signal)
		return err
	case OpPs, OpStatus:
		return nil
	case OpRead, OpList, OpStat, OpRemove, OpMkdir, OpWrite:
		return r.validateFile()
	case OpSockOwner:
		if r.Proto != "tcp" && r.Proto != "udp" {
			return invalid("sockowner: proto %q: want tcp or udp", r.Proto)
		}
		if r.Port < 1 || r.Port > 65535 {
			return invalid("sockowner: port %d out of 1-65535", r.Port)
		}
		return r.validateSockAddrs()
	case "":
		return invalid("request: no op")
	}
	return invalid("request: unknown op %q", r.Op)
}

func validID(id string) error {
	if id == "" {
		return invalid("id: empty")
	}
	if len(id) > MaxIDLen {
		return invalid("id: %d bytes, at most %d", len(id), MaxIDLen)
	}
	for i, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return invalid("id %q: byte %d (%q) is not [A-Za-z0-9_-]", id, i, c)
		}
	}
	return nil
}

func (r *Request) validateExec() error {
	if err := validID(r.ID); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	switch {
	case r.Shell == "" && len(r.Argv) == 0:
		return invalid("exec: empty argv and no shell line")
	case r.Shell != "" && len(r.Argv) > 0:
		return invalid("exec: both argv and a shell line")
	case len(r.Argv) > 0 && r.Argv[0] == "":
		return invalid("exec: argv[0] is empty")
	case len(r.Argv) > MaxArgs:
		return invalid("exec: %d arguments, at most %d", len(r.Argv), MaxArgs)
	case len(r.Env) > MaxArgs:
		return invalid("exec: %d environment entries, at most %d", len(r.Env), MaxArgs)
	}
	total := 0
	for i, a := range append([]string{r.Shell}, r.Argv...) {
		if err := validArg(a); err != nil {
			if i == 0 {
				return fmt.Errorf("exec: shell line: %w", err)
			}
			return fmt.Errorf("exec: argv[%d]: %w", i-1, err)
		}
		total += len(a)
	}
	for i, e := range r.Env {
		if err := ValidEnv(e); err != nil {
			return fmt.Errorf("exec: env[%d]: %w", i, err)
		}
		total += len(e)
	}
	if total > MaxExecBytes {
		return invalid("exec: argv and env are %d bytes, at most %d", total, MaxExecBytes)
	}
	if r.Cwd != "" {
		if err := validPath("cwd", r.Cwd); err != nil {
			return fmt.Errorf("exec: %w", err)
		}
	}
	if err := validUser(r.User); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	if r.TimeoutMS < 0 || r.TimeoutMS > MaxTimeoutMS {
		return invalid("exec: timeout_ms %d out of 0-%d", r.TimeoutMS, MaxTimeoutMS)
	}
	if r.GraceMS < 0 || r.GraceMS > 60000 {
		return invalid("exec: grace_ms %d out of 0-60000", r.GraceMS)
	}
	if r.Background && r.Stdin && !r.TTY {
		return invalid("exec: a background command cannot take stdin")
	}
	return nil
}

func validArg(a string) error {
	if len(a) > MaxArgBytes {
		return invalid("%d bytes, at most %d", len(a), MaxArgBytes)
	}
	if strings.IndexByte(a, 0) >= 0 {
		return invalid("contains a NUL byte")
	}
	return nil
}

// ValidEnv checks one KEY=VALUE entry: a non-empty name without '=' or NUL,
// a value without NUL, at most MaxArgBytes in all.
func ValidEnv(e string) error {
	if err := validArg(e); err != nil {
		return err
	}
	k, _, ok := strings.Cut(e, "=")
	if !ok {
		return invalid("%q is not KEY=VALUE", trunc(e))
	}
	return ValidEnvName(k)
}

// ValidEnvName checks an environment variable name.
func ValidEnvName(k string) error {
	if k == "" {
		return invalid("empty variable name")
	}
	if strings.ContainsAny(k, "=\x00") || len(k) > MaxArgBytes {
		return invalid("bad variable name %q", trunc(k))
	}
	return nil
}

func trunc(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func validUser(u string) error {
	if u == "" {
		return nil
	}
	if len(u) > 64 {
		return invalid("user: %d bytes, at most 64", len(u))
	}
	name, group, _ := strings.Cut(u, ":")
	for _, part := range []string{name, group} {
		for _, c := range []byte(part) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
				return invalid("user %q: %q is not allowed in a user or group", u, c)
			}
		}
	}
	if name == "" {
		return invalid("user %q: empty user", u)
	}
	return nil
}

func validPath(field, p string) error {
	switch {
	case p == "":
		return invalid("%s: empty path", field)
	case len(p) > MaxPath:
		return invalid("%s: %d bytes, at most %d", field, len(p), MaxPath)
	case strings.IndexByte(p, 0) >= 0:
		return invalid("%s %q: contains a NUL byte", field, trunc(p))
	case !path.IsAbs(p):
		return invalid("%s %q: not an absolute path", field, trunc(p))
	}
	return nil
}

func (r *Request) validateSockAddrs() error {
	if r.Local != "" {
		if _, err := netip.ParseAddr(r.Local); err != nil {
			return invalid("sockowner: local %q: %v", trunc(r.Local), err)
		}
	}
	if r.Remote != "" {
		if _, err := netip.ParseAddrPort(r.Remote); err != nil {
			return invalid("sockowner: remote %q: %v", trunc(r.Remote), err)
		}
	}
	if r.AtNS < 0 {
		return invalid("sockowner: negative at_ns %d", r.AtNS)
	}
	return nil
}

func (r *Request) validateFile() error {
	if err := validPath(r.Op+": path", r.Path); err != nil {
		return err
	}
	if r.Size < 0 {
		return invalid("%s: negative size %d", r.Op, r.Size)
	}
	if r.Max < 0 {
		return invalid("%s: negative max %d", r.Op, r.Max)
	}
	if r.Mode&^0o7777 != 0 {
		return invalid("%s: mode %#o has bits beyond 07777", r.Op, r.Mode)
	}
	if r.Op == OpWrite && path.Clean(r.Path) == "/" {
		return invalid("write: path / is not a file")
	}
	return nil
}

var signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "PIPE": syscall.SIGPIPE, "ALRM": syscall.SIGALRM,
	"TERM": syscall.SIGTERM, "CONT": syscall.SIGCONT, "STOP": syscall.SIGSTOP, "TSTP": syscall.SIGTSTP,
	"WINCH": syscall.SIGWINCH, "ABRT": syscall.SIGABRT, "SEGV": syscall.SIGSEGV, "BUS": syscall.SIGBUS,
	"ILL": syscall.SIGILL, "FPE": syscall.SIGFPE, "TRAP": syscall.SIGTRAP, "SYS": syscall.SIGSYS,
	"XCPU": syscall.SIGXCPU, "XFSZ": syscall.SIGXFSZ, "TTIN": syscall.SIGTTIN, "TTOU": syscall.SIGTTOU,
	"URG": syscall.SIGURG, "PROF": syscall.SIGPROF, "VTALRM": syscall.SIGVTALRM, "IO": syscall.SIGIO,
}

// ParseSignal parses TERM, SIGTERM (any case) or a number 1-64.
func ParseSignal(s string) (syscall.Signal, error) {
	if s == "" {
		return 0, invalid("signal: empty")
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 64 {
			return 0, invalid("signal %d out of 1-64", n)
		}
		return syscall.Signal(n), nil
	}
	if sig, ok := signals[strings.TrimPrefix(strings.ToUpper(s), "SIG")]; ok {
		return sig, nil
	}
	return 0, invalid("unknown signal %q", trunc(s))
}

// SignalName names a signal as ParseSignal reads it (SIGKILL -> "KILL").
func SignalName(sig syscall.Signal) string {
	for k, v := range signals {
		if v == sig {
			return k
		}
	}
	return strconv.Itoa(int(sig))
}
