// Package clifront is the fast path of `airlock sandbox exec`: the command
// agents and their frameworks run most, hundreds of times a task. bin/airlock
// (cmd/airlock-front) runs it with this package alone — no HTTP stack, no
// command tree — and hands every other command line to the CLI
// (airlock-cli), which gives the same command the same meaning: Parse takes
// only the forms it understands in full and leaves the rest, a bad one
// included, to the CLI and its precise errors.
//
// The request is the control API's POST /v1/sandboxes/ID/exec, sent as
// HTTP/1.0 on a new unix-socket connection: the appliance streams the NDJSON
// frames unframed and closes, so no chunked decoding is needed. Ctrl-C or
// SIGTERM kills the process as it does any Unix tool (the CLI instead
// prints that the stream ended and exits 1); either way the connection
// closes and the appliance ends the command.
package clifront

import (
	"bufio"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"airlock/client/wire"
)

// MaxStdin is how much stdin `sandbox exec --stdin` sends: the request
// carries it base64-encoded (4/3 of it) with the command, within the
// appliance's 16 MiB bound on a request body.
const MaxStdin = 12<<20 - 64<<10

// ReadStdin reads a command's stdin for `sandbox exec --stdin`, refusing
// more than MaxStdin (it was cut there without a word).
func ReadStdin(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxStdin+1))
	if err != nil {
		return nil, fmt.Errorf("read stdin: %w", err)
	}
	if len(b) > MaxStdin {
		return nil, fmt.Errorf("stdin is larger than %d bytes, all --stdin sends: copy larger inputs in with `airlock sandbox cp` and read them from a file", MaxStdin)
	}
	return b, nil
}

// Exec is a `sandbox exec` command line the fast path runs.
type Exec struct {
	Sandbox string
	Socket  string // --socket; "" for the environment's
	Req     wire.ExecRequest
	Stdin   bool // --stdin: send this process's stdin
}

// Parse recognizes `sandbox exec [flags] ID -- CMD [ARG...]` whose flags
// are among --cwd, --user/-u, --env/-e, --timeout, --background, --stdin/-i
// and --socket, each written as --flag VALUE or --flag=VALUE. Anything else
// (--tty, a remote appliance's flags, --help, a usage error) is not its:
// false, and the CLI runs it.
func Parse(args []string) (Exec, bool) {
	var x Exec
	if len(args) < 4 || args[0] != "sandbox" || args[1] != "exec" {
		return x, false
	}
	var env []string
	rest := args[2:]
	ids, dash := 0, false
	for len(rest) > 0 && !dash {
		a := rest[0]
		rest = rest[1:]
		if a == "--" {
			dash = true
			continue
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			ids++
			x.Sandbox = a
			continue
		}
		name, val, inline := strings.Cut(a, "=")
		switch name {
		case "--background", "--stdin", "-i":
			if inline {
				return x, false // --background=false: the CLI's to read
			}
			if name == "--background" {
				x.Req.Background = true
			} else {
				x.Stdin = true
			}
			continue
		case "--cwd", "--user", "-u", "--env", "-e", "--timeout", "--socket":
		default:
			return x, false
		}
		if !inline {
			if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
				return x, false
			}
			val, rest = rest[0], rest[1:]
		}
		switch name {
		case "--cwd":
			x.Req.Cwd = val
		case "--user", "-u":
			x.Req.User = val
		case "--env", "-e":
			env = append(env, val)
		case "--socket":
			x.Socket = val
		case "--timeout":
			d, err := time.ParseDuration(val)
			if err != nil {
				return x, false
			}
			x.Req.Timeout = wire.Duration(d)
		}
	}
	if ids != 1 || !dash || len(rest) == 0 {
		return x, false
	}
	if x.Req.Background && x.Stdin {
		return x, false
	}
	var err error
	if x.Req.Env, err = KeyValues("--env", env); err != nil {
		return x, false
	}
	x.Req.Argv = rest
	return x, true
}

// KeyValues parses NAME=VALUE flags (flag names them in the error).
func KeyValues(flag string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q: want NAME=VALUE", flag, kv)
		}
		out[k] = v
	}
	return out, nil
}

// Run runs x against the appliance and returns the exit status the CLI
// would: the command's, 124 for a timeout, 1 for an error (printed to
// stderr as "airlock: ..."). handled is false when nothing was sent — the
// socket could not be dialed, or the environment names a remote appliance
// — so the CLI can run the command line and explain why.
func Run(x Exec, stdin io.Reader, stdout, stderr io.Writer) (code int, handled bool) {
	sock := x.Socket
	if sock == "" {
		var local bool
		if sock, local = wire.SocketFromEnv(); !local {
			return 0, false
		}
	}
	// Connected before stdin is read: a command line handed to the CLI
	// must find its stdin whole.
	fd, err := dial(sock)
	if err != nil {
		return 0, false
	}
	if x.Stdin {
		// Stdin may take longer than the appliance waits for a request's
		// headers (10 s): the first connection only showed that it
		// answers; the request goes on a new one once stdin is read.
		syscall.Close(fd)
		if x.Req.Stdin, err = ReadStdin(stdin); err != nil {
			fmt.Fprintln(stderr, "airlock:", err)
			return 1, true
		}
		if fd, err = dial(sock); err != nil {
			fmt.Fprintf(stderr, "airlock: connect to %s: %v\n", sock, err)
			return 1, true
		}
	}
	body := wire.AppendExecRequest(nil, &x.Req)
	// Ctrl-C or SIGTERM kills this process, as it does any Unix tool: the
	// appliance sees the connection close and ends the command (and all it
	// started). No handler is installed: it would cost a thread per run.
	res, err := exchange(fd, request(x.Sandbox, body), stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "airlock:", err)
		return 1, true
	}
	if x.Req.Background {
		fmt.Fprintln(stdout, res.ID)
		return 0, true
	}
	return ExitStatus(stderr, res), true
}

// dial connects to the control socket with a blocking connect that waits
// at most 5 s, as the Go client's dialer does.
func dial(sock string) (int, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	tv := syscall.Timeval{Sec: 5}
	if err = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv); err == nil {
		err = syscall.Connect(fd, &syscall.SockaddrUnix{Name: sock})
	}
	if err == nil {
		err = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &syscall.Timeval{})
	}
	if err != nil {
		syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// request is the exec request: HTTP/1.0, so the appliance streams the
// frames unframed and closes.
func request(sandbox string, body []byte) []byte {
	b := make([]byte, 0, 256+len(body))
	b = append(b, "POST /v1/sandboxes/"...)
	b = append(b, url.PathEscape(sandbox)...)
	b = append(b, "/exec HTTP/1.0\r\nHost: airlock\r\nUser-Agent: airlock-front\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, body...)
}

// exchange sends the request on the connected socket fd, still blocking,
// and only then moves fd into Go's network poller to wait for the answer:
// the poller's start-up overlaps the appliance's work instead of delaying
// the request. Waiting in the poller leaves every thread asleep (a
// blocking read kept the runtime's monitor waking every 20 µs: 0.17 ms
// more per round trip, measured). fd is closed on return.
func exchange(fd int, req []byte, stdout, stderr io.Writer) (wire.ExecResult, error) {
	var werr error
	for len(req) > 0 {
		n, err := syscall.Write(fd, req)
		if err == syscall.EINTR {
			continue
		}
		if err != nil { // the appliance may have answered already (a refused body): read that first
			werr = fmt.Errorf("control API: %w", err)
			break
		}
		req = req[n:]
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return wire.ExecResult{}, fmt.Errorf("control API: %w", err)
	}
	conn := os.NewFile(uintptr(fd), "control socket")
	defer conn.Close()
	r := bufio.NewReader(conn)
	line, err := headerLine(r)
	if err != nil {
		if werr != nil {
			return wire.ExecResult{}, werr
		}
		return wire.ExecResult{}, fmt.Errorf("control API: reading the response: %w", err)
	}
	proto, status, _ := strings.Cut(line, " ")
	code, _, _ := strings.Cut(status, " ")
	n, err := strconv.Atoi(code)
	if !strings.HasPrefix(proto, "HTTP/1.") || err != nil || len(code) != 3 {
		return wire.ExecResult{}, fmt.Errorf("control API: malformed status line %q", line)
	}
	requestID, err := readHeader(r, "X-Request-Id")
	if err != nil {
		return wire.ExecResult{}, fmt.Errorf("control API: reading the response: %w", err)
	}
	if n >= 300 {
		return wire.ExecResult{}, wire.DecodeError(r, status, n, requestID)
	}
	return wire.ReadExecFrames(r, stdout, stderr)
}

// maxHeaderLines bounds the response's header lines.
const maxHeaderLines = 100

// headerLine reads one line of the response head (at most the reader's
// buffer, 4 KiB), without its CRLF.
func headerLine(r *bufio.Reader) (string, error) {
	b, err := r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return "", fmt.Errorf("a header line longer than %d bytes", r.Size())
	}
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return "", err
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// readHeader reads the header lines up to the blank line that ends them
// and returns the value of the one named name (in any case).
func readHeader(r *bufio.Reader, name string) (string, error) {
	var value string
	for range maxHeaderLines {
		line, err := headerLine(r)
		if err != nil {
			return "", err
		}
		if line == "" {
			return value, nil
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return "", fmt.Errorf("malformed header line %q", line)
		}
		if strings.EqualFold(strings.TrimSpace(k), name) {
			value = strings.TrimSpace(v)
		}
	}
	return "", fmt.Errorf("more than %d header lines", maxHeaderLines)
}

// ExitStatus prints why a command ended when that is not plain (a
// timeout, a limit, a kill, truncated capture) and returns the exit status
// `airlock sandbox exec` and `airlock run` exit with.
func ExitStatus(info io.Writer, res wire.ExecResult) int {
	switch {
	case res.TimedOut:
		fmt.Fprintf(info, "airlock: the command timed out after %s and was killed (limit: timeout)\n", time.Duration(res.DurationMS)*time.Millisecond)
		return 124
	case res.Limit == wire.LimitFsize:
		fmt.Fprintf(info, "airlock: the command was ended by the file size limit (limit: fsize, signal %s)\n", res.Signal)
	case res.Limit == wire.LimitCPU:
		fmt.Fprintf(info, "airlock: the command was ended by the CPU time limit (limit: cpu, signal %s)\n", res.Signal)
	case res.Killed:
		fmt.Fprintln(info, "airlock: the command was killed")
	}
	if res.Truncated {
		fmt.Fprintln(info, "airlock: captured output was truncated in the audit record (the stream here is complete)")
	}
	return res.ExitCode
}
