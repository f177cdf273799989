package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"airlock/internal/agentwire"
)

// Client talks to one sandbox's agent. Requests on different goroutines
// use different connections (the agent serves each connection in turn);
// idle connections are kept for reuse.
type Client struct {
	t      *target
	mu     sync.Mutex
	idle   []*wconn
	closed bool
}

// maxIdle bounds the kept connections per sandbox.
const maxIdle = 16

type wconn struct {
	c  *net.UnixConn
	r  *agentwire.Reader
	wm sync.Mutex
}

func (w *wconn) send(t agentwire.Type, p []byte) error {
	w.wm.Lock()
	defer w.wm.Unlock()
	return agentwire.WriteFrame(w.c, t, p)
}

func (w *wconn) sendJSON(t agentwire.Type, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return w.send(t, b)
}

// RemoteError is an error the agent answered with.
type RemoteError struct {
	Code string // agentwire.Code*
	Msg  string
}

func (e *RemoteError) Error() string { return "agent: " + e.Msg }

// New opens a client for the sandbox whose PID 1 is the host pid pid, and
// checks that an agent answers there.
func New(pid int) (*Client, error) {
	t, err := openTarget(pid)
	if err != nil {
		return nil, err
	}
	c := &Client{t: t}
	w, err := c.get()
	if err != nil {
		t.close()
		return nil, err
	}
	c.put(w)
	return c, nil
}

// Pid is the sandbox's PID 1 (host pid) this client talks to.
func (c *Client) Pid() int { return c.t.pid }

// Close closes the idle connections and the pidfd.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	for _, w := range c.idle {
		w.c.Close()
	}
	c.idle = nil
	c.t.close()
	return nil
}

func (c *Client) get() (*wconn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("agent: client closed: %w", ErrUnavailable)
	}
	if n := len(c.idle); n > 0 {
		w := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		return w, nil
	}
	c.mu.Unlock()
	uc, err := c.t.dial()
	if err != nil {
		return nil, err
	}
	return &wconn{c: uc, r: agentwire.NewBufferedReader(uc)}, nil
}

func (c *Client) put(w *wconn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.idle) >= maxIdle {
		w.c.Close()
		return
	}
	c.idle = append(c.idle, w)
}

// withDeadline makes ctx's end interrupt the connection's I/O.
func withDeadline(ctx context.Context, w *wconn) func() {
	if ctx.Done() == nil {
		return func() {}
	}
	stop := context.AfterFunc(ctx, func() { _ = w.c.SetDeadline(time.Unix(1, 0)) })
	return func() { stop() }
}

func request(req *agentwire.Request) *agentwire.Request {
	req.V = agentwire.Version
	return req
}

// readResult reads the frames of an answer up to its Result; other frames
// go to onFrame (nil: any other frame is a protocol error).
func readResult(w *wconn, onFrame func(agentwire.Type, []byte) error) (*agentwire.Result, error) {
	for {
		t, p, err := w.r.Next()
		if err != nil {
			return nil, fmt.Errorf("agent: read answer: %w", err)
		}
		if t == agentwire.TResult {
			res, err := agentwire.DecodeResult(p)
			if err != nil {
				return nil, fmt.Errorf("agent: %w", err)
			}
			return res, nil
		}
		if onFrame == nil {
			return nil, fmt.Errorf("agent: unexpected %s frame", t)
		}
		if err := onFrame(t, p); err != nil {
			return nil, err
		}
	}
}

func remote(res *agentwire.Result) error {
	if res.Error == "" {
		return nil
	}
	return &RemoteError{Code: res.Code, Msg: res.Error}
}

// Do runs a request that has no data frames (wait, signal, kill, ps,
// forget, stat, remove, mkdir, sockowner, status).
func (c *Client) Do(ctx context.Context, req agentwire.Request) (*agentwire.Result, error) {
	switch req.Op {
	case agentwire.OpExec, agentwire.OpAttach, agentwire.OpRead, agentwire.OpWrite, agentwire.OpList:
		return nil, fmt.Errorf("agent: %s streams: use its own method, not Do: %w", req.Op, agentwire.ErrInvalid)
	}
	if err := request(&req).Validate(); err != nil {
		return nil, err
	}
	w, err := c.get()
	if err != nil {
		return nil, err
	}
	done := withDeadline(ctx, w)
	res, err := func() (*agentwire.Result, error) {
		if err := w.sendJSON(agentwire.TRequest, &req); err != nil {
			return nil, fmt.Errorf("agent: send %s: %w", req.Op, err)
		}
		return readResult(w, nil)
	}()
	done()
	if err != nil {
		w.c.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("agent: %s: %w", req.Op, context.Cause(ctx))
		}
		return nil, err
	}
	c.put(w)
	return res, remote(res)
}

// ReadFile streams a file of the sandbox to dst.
func (c *Client) ReadFile(ctx context.Context, path string, max int64, dst io.Writer) (*agentwire.FileInfo, error) {
	req := request(&agentwire.Request{Op: agentwire.OpRead, Path: path, Max: max})
	if err := req.Validate(); err != nil {
		return nil, err
	}
	w, err := c.get()
	if err != nil {
		return nil, err
	}
	done := withDeadline(ctx, w)
	defer done()
	if err := w.sendJSON(agentwire.TRequest, req); err != nil {
		w.c.Close()
		return nil, fmt.Errorf("agent: send read: %w", err)
	}
	var werr error
	ended := false
	var n int64
	limit := max
	if limit <= 0 {
		limit = 1 << 30 // the agent's own hard bound
	}
	res, err := readResult(w, func(t agentwire.Type, p []byte) error {
		switch {
		case t == agentwire.TData && !ended:
			// The agent is untrusted input: never take more than was asked.
			if n += int64(len(p)); n > limit {
				return fmt.Errorf("agent: read %s: sent more than the %d bytes asked for", path, limit)
			}
			if werr == nil {
				_, werr = dst.Write(p)
			}
		case t == agentwire.TDataEnd && !ended:
			ended = true
		default:
			return fmt.Errorf("agent: unexpected %s frame in a read", t)
		}
		return nil
	})
	if err != nil {
		w.c.Close()
		return nil, err
	}
	c.put(w)
	if err := remote(res); err != nil {
		return nil, err
	}
	if werr != nil {
		return nil, fmt.Errorf("agent: read %s: write out: %w", path, werr)
	}
	if !ended || res.File == nil {
		return nil, fmt.Errorf("agent: read %s: answer without its data end", path)
	}
	return res.File, nil
}

// WriteFile writes exactly size bytes from src to path in the sandbox,
// atomically (the agent writes a temporary file and renames it).
func (c *Client) WriteFile(ctx context.Context, path string, mode uint32, size, max int64, src io.Reader) (*agentwire.FileInfo, error) {
	req := request(&agentwire.Request{Op: agentwire.OpWrite, Path: path, Mode: mode, Size: size, Max: max})
	if err := req.Validate(); err != nil {
		return nil, err
	}
	w, err := c.get()
	if err != nil {
		return nil, err
	}
	done := withDeadline(ctx, w)
	defer done()
	fail := func(err error) (*agentwire.FileInfo, error) { w.c.Close(); return nil, err }
	if err := w.sendJSON(agentwire.TRequest, req); err != nil {
		return fail(fmt.Errorf("agent: send write: %w", err))
	}
	buf := make([]byte, 256<<10)
	var n int64
	for n < size {
		k, rerr := src.Read(buf[:min(int64(len(buf)), size-n)])
		if k > 0 {
			if err := w.send(agentwire.TData, buf[:k]); err != nil {
				return fail(fmt.Errorf("agent: send data: %w", err))
			}
			n += int64(k)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fail(fmt.Errorf("agent: write %s: read source: %w", path, rerr))
		}
	}
	if err := w.send(agentwire.TDataEnd, nil); err != nil {
		return fail(fmt.Errorf("agent: send data end: %w", err))
	}
	res, err := readResult(w, nil)
	if err != nil {
		return fail(err)
	}
	c.put(w)
	if err := remote(res); err != nil {
		return nil, err
	}
	if n != size {
		return nil, fmt.Errorf("agent: write %s: source had %d of %d bytes", path, n, size)
	}
	return res.File, nil
}

// IsRemote reports whether err is the agent's answer with code.
func IsRemote(err error, code string) bool {
	var re *RemoteError
	return errors.As(err, &re) && re.Code == code
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
