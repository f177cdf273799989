// Package wire is the exec stream of Airlock's control API and its error
// body: the types client re-exports, the stream reader, and where the
// control socket is. It links no HTTP stack, so bin/airlock (cmd/airlock-front)
// can run `airlock sandbox exec` with it alone in a millisecond or two.
package wire

import (
	"airlock/audit/schema"
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// DefaultSocket is where `airlock serve` listens unless configured
// otherwise.
const DefaultSocket = "/run/airlock/airlock.sock"

// EnvURL and EnvSocket name the control API the clients use:
// AIRLOCK_URL (https://HOST:PORT, or unix:PATH) before AIRLOCK_SOCKET.
const (
	EnvURL    = "AIRLOCK_URL"
	EnvSocket = "AIRLOCK_SOCKET"
)

// SocketFromEnv is the control socket the environment names, and false
// when AIRLOCK_URL names a remote appliance instead.
func SocketFromEnv() (string, bool) {
	u := os.Getenv(EnvURL)
	switch {
	case strings.HasPrefix(u, "unix:"):
		return strings.TrimPrefix(strings.TrimPrefix(u, "unix:"), "//"), true
	case u != "":
		return "", false
	}
	if s := os.Getenv(EnvSocket); s != "" {
		return s, true
	}
	return DefaultSocket, true
}

// ExecRequest runs one command in a sandbox.
type ExecRequest struct {
	Argv    []string          `json:"argv,omitempty"`
	Shell   string            `json:"shell,omitempty"` // a line for /bin/sh -c instead of argv
	Cwd     string            `json:"cwd,omitempty"`
	User    string            `json:"user,omitempty"` // name, uid or uid:gid in the sandbox
	Env     map[string]string `json:"env,omitempty"`
	Stdin   []byte            `json:"stdin,omitempty"`
	Timeout Duration          `json:"timeout,omitempty"`
	// Background returns once the command started (the exit frame then
	// has Running); follow it with Attach, Kill, Processes.
	Background bool `json:"background,omitempty"`
	// TTY runs the command on a terminal of Rows x Cols; the request must
	// then be an upgrade (Client.ExecTTY): the connection carries the
	// terminal's bytes both ways.
	TTY  bool   `json:"tty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
}

// ExecResult is how a command ended.
type ExecResult struct {
	ID         string `json:"id,omitempty"` // the exec id (its audit record, and Attach/Kill)
	ExitCode   int    `json:"exit_code"`
	DurationMS int64  `json:"duration_ms"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	Killed     bool   `json:"killed,omitempty"`
	// Limit names the limit that ended the command: timeout, fsize (the
	// file size limit, SIGXFSZ) or cpu (SIGXCPU); empty when none did.
	Limit     string `json:"limit,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	// Through the in-sandbox agent.
	Agent       string `json:"agent,omitempty"` // airlock-init | podman-exec
	Pid         int    `json:"pid,omitempty"`
	Signal      string `json:"signal,omitempty"`
	Running     bool   `json:"running,omitempty"` // a background command, or a detached attach
	UtimeUS     int64  `json:"utime_us,omitempty"`
	StimeUS     int64  `json:"stime_us,omitempty"`
	MaxRSSKB    int64  `json:"maxrss_kb,omitempty"`
	StdoutBytes int64  `json:"stdout_bytes,omitempty"`
	StderrBytes int64  `json:"stderr_bytes,omitempty"`
}

// ExecFrame is one line of the NDJSON exec stream: output (Stream "stdout"
// or "stderr" with Data), then exactly one final frame with Exit or Error.
type ExecFrame struct {
	Stream string      `json:"stream,omitempty"`
	Data   []byte      `json:"data,omitempty"`
	Exit   *ExecResult `json:"exit,omitempty"`
	Error  *Error      `json:"error,omitempty"`
}

// Error is the API's error body: a stable code and a message for people.
type Error struct {
	Status    int    `json:"-"`
	Code      string `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"request_id,omitempty"`
}

// DecodeError reads a refused request's body (at most 1 MiB) as the API's
// error; a body that is not one becomes an internal error quoting status
// ("400 Bad Request") and the body. requestID (the X-Request-Id header)
// fills in a body without one.
func DecodeError(body io.Reader, status string, code int, requestID string) *Error {
	e := &Error{}
	b, _ := io.ReadAll(io.LimitReader(body, 1<<20))
	if err := json.Unmarshal(b, e); err != nil || e.Message == "" {
		e = &Error{Code: "internal", Message: fmt.Sprintf("%s: %s", status, strings.TrimSpace(string(b)))}
	}
	e.Status = code
	if e.RequestID == "" {
		e.RequestID = requestID
	}
	return e
}

func (e *Error) Error() string {
	if e.Code == "" {
		return e.Message
	}
	return fmt.Sprintf("%s (%s)", e.Message, e.Code)
}

// Duration is a time.Duration that travels as a Go duration string.
type Duration time.Duration

// MarshalText writes "1m30s".
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("not a duration: %q", b)
	}
	*d = Duration(v)
	return nil
}

// The limits that can end a command (ExecResult.Limit, the exec event's
// limit).
const (
	LimitTimeout = schema.ExecLimitTimeout // its exec timeout: the runner killed its tree
	LimitFsize   = schema.ExecLimitFsize   // the file size rlimit (SIGXFSZ)
	LimitCPU     = schema.ExecLimitCPU     // the CPU time rlimit (SIGXCPU)
)

// ReadExecStream copies an exec stream's output frames to stdout and
// stderr (nil drops one) and returns its exit frame, or its error frame as
// an *Error. It reads the stream to its end, so a pooled connection can be
// used again.
func ReadExecStream(r io.Reader, stdout, stderr io.Writer) (ExecResult, error) {
	res, err := ReadExecFrames(r, stdout, stderr)
	if _, ok := err.(*Error); ok || err == nil {
		endOfStream(r)
	}
	return res, err
}

// ReadExecFrames is ReadExecStream for a connection used once: it returns
// at the final frame, without waiting for the end of the response.
func ReadExecFrames(r io.Reader, stdout, stderr io.Writer) (ExecResult, error) {
	br := bufio.NewReader(r) // r itself when it is one already (the CLI front's)
	var line []byte
	for {
		var err error
		if line, err = readFrameLine(br, line[:0]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return ExecResult{}, fmt.Errorf("exec stream ended without an exit status: %w", err)
		}
		var f ExecFrame
		if !parseFrameFast(line, &f) {
			if err := json.Unmarshal(line, &f); err != nil {
				return ExecResult{}, fmt.Errorf("exec stream ended without an exit status: %w", err)
			}
		}
		switch {
		case f.Exit != nil:
			return *f.Exit, nil
		case f.Error != nil:
			return ExecResult{}, f.Error
		case f.Stream == "stdout" && stdout != nil:
			if _, err := stdout.Write(f.Data); err != nil {
				return ExecResult{}, err
			}
		case f.Stream == "stderr" && stderr != nil:
			if _, err := stderr.Write(f.Data); err != nil {
				return ExecResult{}, err
			}
		}
	}
}

// MaxFrameLine bounds one line of an exec stream (the appliance writes
// output frames of at most a few hundred KiB).
const MaxFrameLine = 64 << 20

// readFrameLine reads the stream's next non-blank line, without its end
// of line, into buf. A last line with no newline before EOF counts.
func readFrameLine(br *bufio.Reader, buf []byte) ([]byte, error) {
	for {
		chunk, err := br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if err == bufio.ErrBufferFull {
			if len(buf) > MaxFrameLine {
				return nil, fmt.Errorf("a frame of more than %d bytes", MaxFrameLine)
			}
			continue
		}
		if err != nil && (err != io.EOF || len(buf) == 0) {
			return nil, err
		}
		line := trimSpace(buf)
		if len(line) > 0 {
			return line, nil
		}
		if err != nil {
			return nil, err
		}
		buf = buf[:0]
	}
}

func trimSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// endOfStream reads what follows an exec stream's last frame, the end of
// the response and nothing more (bounded, should an appliance send more),
// so the connection goes back to the pool: a body closed before its end
// makes the next call dial again.
func endOfStream(r io.Reader) { _, _ = io.Copy(io.Discard, io.LimitReader(r, 64<<10)) }
