package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"airlock/internal/agentwire"
)

// Resize is a terminal size change.
type Resize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// ExecTTY runs req on a terminal in the sandbox: stdin's bytes are typed
// into it, its output goes to stdout, each value on resize changes its
// size. It returns when the command ends. Over the upgraded connection
// both sides speak the agent's frames (internal/agentwire): stdin,
// stdin-eof and resize up; stdout and one result (ExecResult JSON, or an
// Error) down.
func (c *Client) ExecTTY(ctx context.Context, id string, req ExecRequest, stdin io.Reader, stdout io.Writer, resize <-chan Resize) (ExecResult, error) {
	return c.terminal(ctx, sbPath(id, "/exec"), req, stdin, stdout, resize)
}

// Shell opens a recorded shell session (POST /v1/sandboxes/{id}/shell):
// like ExecTTY, with req's command defaulting to /bin/sh; what is typed
// and shown is kept as the artifact shells/EXEC_ID.jsonl (EXEC_ID is the
// result's ID). It needs the attach scope.
func (c *Client) Shell(ctx context.Context, id string, req ExecRequest, stdin io.Reader, stdout io.Writer, resize <-chan Resize) (ExecResult, error) {
	return c.terminal(ctx, sbPath(id, "/shell"), req, stdin, stdout, resize)
}

func (c *Client) terminal(ctx context.Context, path string, req ExecRequest, stdin io.Reader, stdout io.Writer, resize <-chan Resize) (ExecResult, error) {
	req.TTY = true
	b, err := json.Marshal(req)
	if err != nil {
		return ExecResult{}, err
	}
	hr, err := c.newRequest(ctx, http.MethodPost, path, nil, bytes.NewReader(b))
	if err != nil {
		return ExecResult{}, err
	}
	hr.Header.Set("Connection", "Upgrade")
	hr.Header.Set("Upgrade", TTYUpgrade)
	resp, err := c.do(hr)
	if err != nil {
		return ExecResult{}, err
	}
	rw, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != http.StatusSwitchingProtocols || !ok {
		resp.Body.Close()
		return ExecResult{}, fmt.Errorf("control API: terminal exec was not upgraded (status %d)", resp.StatusCode)
	}
	defer rw.Close()
	go func() {
		<-ctx.Done()
		rw.Close()
	}()
	var wmu chanMutex = make(chan struct{}, 1)
	send := func(t agentwire.Type, p []byte) error {
		wmu <- struct{}{}
		defer func() { <-wmu }()
		return agentwire.WriteFrame(rw, t, p)
	}
	if resize != nil {
		go func() {
			for rs := range resize {
				b, _ := json.Marshal(rs)
				if send(agentwire.TResize, b) != nil {
					return
				}
			}
		}()
	}
	if stdin != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := stdin.Read(buf)
				if n > 0 && send(agentwire.TStdin, buf[:n]) != nil {
					return
				}
				if err != nil {
					_ = send(agentwire.TStdinEOF, nil)
					return
				}
			}
		}()
	}
	r := agentwire.NewReader(rw)
	for {
		t, p, err := r.Next()
		if err != nil {
			return ExecResult{}, fmt.Errorf("terminal exec: %w", err)
		}
		switch t {
		case agentwire.TStdout:
			if _, err := stdout.Write(p); err != nil {
				return ExecResult{}, err
			}
		case agentwire.TResult:
			var f ExecFrame
			if err := json.Unmarshal(p, &f); err != nil {
				return ExecResult{}, fmt.Errorf("terminal exec: bad result: %w", err)
			}
			if f.Error != nil {
				return ExecResult{}, f.Error
			}
			if f.Exit == nil {
				return ExecResult{}, fmt.Errorf("terminal exec: result without an exit")
			}
			return *f.Exit, nil
		default:
			return ExecResult{}, fmt.Errorf("terminal exec: unexpected %s frame", t)
		}
	}
}

type chanMutex chan struct{}
