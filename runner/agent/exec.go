package agent

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"airlock/internal/agentwire"
)

// Streams are a command's standard streams on the host side.
type Streams struct {
	Stdin  io.Reader // nil: none (the agent gives the command /dev/null)
	Stdout io.Writer // nil: discarded
	Stderr io.Writer
	Resize <-chan agentwire.Resize // PTY size changes; nil: none
}

// Exec starts req (Op exec) and, unless it is a background command,
// streams its output until it ends. When ctx ends first, the command and
// everything it spawned are killed and the exit says Killed. A background
// command returns a nil Exit at once.
func (c *Client) Exec(ctx context.Context, req agentwire.Request, s Streams, started func(agentwire.Started)) (*agentwire.Exit, error) {
	req.Op = agentwire.OpExec
	req.Stdin = s.Stdin != nil
	cancel := func() {
		kctx, done := context.WithTimeout(context.Background(), 10*time.Second)
		defer done()
		_, _ = c.Do(kctx, agentwire.Request{Op: agentwire.OpKill, ID: req.ID})
	}
	return c.stream(ctx, req, s, started, cancel)
}

// Attach streams a command's kept output (its last 512 KiB) and then its
// live output until it ends; ctx's end detaches (the command goes on).
func (c *Client) Attach(ctx context.Context, id string, s Streams, started func(agentwire.Started)) (*agentwire.Exit, error) {
	return c.stream(ctx, agentwire.Request{Op: agentwire.OpAttach, ID: id}, s, started, nil)
}

func (c *Client) stream(ctx context.Context, req agentwire.Request, s Streams, started func(agentwire.Started), onCancel func()) (*agentwire.Exit, error) {
	if err := request(&req).Validate(); err != nil {
		return nil, err
	}
	w, err := c.get()
	if err != nil {
		return nil, err
	}
	if err := w.sendJSON(agentwire.TRequest, &req); err != nil {
		w.c.Close()
		return nil, fmt.Errorf("agent: send %s: %w", req.Op, err)
	}
	t, p, err := w.r.Next()
	if err != nil {
		w.c.Close()
		return nil, fmt.Errorf("agent: read answer: %w", err)
	}
	foreground := !req.Background
	if t == agentwire.TResult {
		res, derr := agentwire.DecodeResult(p)
		if derr != nil || res.Error == "" {
			w.c.Close()
			return nil, fmt.Errorf("agent: %s answered without starting: %v", req.Op, derr)
		}
		if foreground && w.send(agentwire.TStdinEOF, nil) != nil {
			w.c.Close()
		} else {
			c.put(w)
		}
		return nil, remote(res)
	}
	var st agentwire.Started
	if t != agentwire.TStarted || agentwire.Decode(t, p, &st) != nil {
		w.c.Close()
		return nil, fmt.Errorf("agent: %s: expected a started frame, got %s", req.Op, t)
	}
	if started != nil {
		started(st)
	}
	if !foreground {
		res, err := readResult(w, nil)
		if err != nil {
			w.c.Close()
			return nil, err
		}
		c.put(w)
		return nil, remote(res)
	}
	in := &input{w: w}
	go in.pump(s)
	var stop func() bool
	if onCancel == nil {
		stop = context.AfterFunc(ctx, in.detach)
	} else {
		stop = context.AfterFunc(ctx, onCancel)
	}
	res, err := readResult(w, func(t agentwire.Type, p []byte) error {
		var dst io.Writer
		switch t {
		case agentwire.TStdout:
			dst = s.Stdout
		case agentwire.TStderr:
			dst = s.Stderr
		default:
			return fmt.Errorf("agent: unexpected %s frame in an exec", t)
		}
		if dst != nil {
			_, _ = dst.Write(p) // a failing writer loses output, not the command
		}
		return nil
	})
	stop()
	ok := in.end()
	if err != nil || !ok {
		w.c.Close()
		if err == nil {
			err = fmt.Errorf("agent: %s: could not end the input stream", req.Op)
		}
		return nil, err
	}
	c.put(w)
	if err := remote(res); err != nil {
		return nil, err
	}
	return res.Exit, nil
}

// input sends stdin and resize frames until it is ended; exactly one
// stdin-eof or detach frame closes it, as the protocol wants.
type input struct {
	w     *wconn
	mu    sync.Mutex
	ended bool
	err   error
}

func (in *input) sendLocked(t agentwire.Type, p []byte) bool {
	if in.ended {
		return false
	}
	if err := in.w.send(t, p); err != nil {
		in.err = err
		in.ended = true
		return false
	}
	return true
}

func (in *input) send(t agentwire.Type, p []byte) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.sendLocked(t, p)
}

func (in *input) closeWith(t agentwire.Type) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.sendLocked(t, nil) {
		in.ended = true
	}
}

func (in *input) detach() { in.closeWith(agentwire.TDetach) }

// end closes the input if still open; false when the stream broke.
func (in *input) end() bool {
	in.closeWith(agentwire.TStdinEOF)
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.err == nil
}

func (in *input) pump(s Streams) {
	if s.Resize != nil {
		go func() {
			for rs := range s.Resize {
				b := mustJSON(rs)
				if !in.send(agentwire.TResize, b) {
					return
				}
			}
		}()
	}
	if s.Stdin == nil {
		return
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Stdin.Read(buf)
		if n > 0 && !in.send(agentwire.TStdin, buf[:n]) {
			return
		}
		if err != nil {
			in.closeWith(agentwire.TStdinEOF)
			return
		}
	}
}
