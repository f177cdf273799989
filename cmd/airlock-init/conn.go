package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"airlock/internal/agentwire"
)

// conn is one accepted connection: requests one at a time; frames may be
// written by a command's output readers concurrently, so writes are locked.
type conn struct {
	a  *agent
	c  net.Conn
	r  *agentwire.Reader
	mu sync.Mutex
}

func (c *conn) send(t agentwire.Type, p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return agentwire.WriteFrame(c.c, t, p)
}

func (c *conn) sendJSON(t agentwire.Type, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.send(t, b)
}

func (c *conn) result(r *agentwire.Result) error { return c.sendJSON(agentwire.TResult, r) }

// opError is an error with a Result code.
type opError struct {
	code string
	err  error
}

func (e *opError) Error() string { return e.err.Error() }
func (e *opError) Unwrap() error { return e.err }

func errorf(code, format string, a ...any) error {
	return &opError{code: code, err: fmt.Errorf(format, a...)}
}

func failResult(err error) *agentwire.Result {
	code := agentwire.CodeInternal
	var oe *opError
	switch {
	case errors.As(err, &oe):
		code = oe.code
	case errors.Is(err, agentwire.ErrInvalid):
		code = agentwire.CodeInvalid
	}
	return &agentwire.Result{Error: err.Error(), Code: code}
}

func (a *agent) handleConn(nc net.Conn) {
	c := &conn{a: a, c: nc, r: agentwire.NewBufferedReader(nc)}
	defer nc.Close()
	defer func() {
		if r := recover(); r != nil {
			logf("request handler panicked: %v", r)
		}
	}()
	for {
		t, p, err := c.r.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = c.result(failResult(fmt.Errorf("read request: %w", err)))
			}
			return
		}
		if t != agentwire.TRequest {
			_ = c.result(failResult(errorf(agentwire.CodeInvalid, "expected a request frame, got %s", t)))
			return
		}
		req, err := agentwire.DecodeRequest(p)
		if err != nil {
			// The frame was whole, so the stream is still in step: answer
			// and go on, except for a write whose data would follow.
			if c.result(failResult(err)) != nil || isWrite(p) {
				return
			}
			continue
		}
		if keep := c.dispatch(req); !keep {
			return
		}
	}
}

// isWrite tells whether an undecodable request may be followed by data.
func isWrite(p []byte) bool {
	var probe struct {
		Op string `json:"op"`
	}
	return json.Unmarshal(p, &probe) != nil || probe.Op == agentwire.OpWrite
}

// dispatch runs one request; false ends the connection (the stream is out
// of step).
func (c *conn) dispatch(req *agentwire.Request) bool {
	a := c.a
	switch req.Op {
	case agentwire.OpExec:
		return c.exec(req)
	case agentwire.OpAttach:
		return c.attach(req)
	case agentwire.OpWrite:
		return c.write(req)
	case agentwire.OpRead:
		return c.read(req)
	case agentwire.OpList:
		return c.list(req)
	}
	var res *agentwire.Result
	var err error
	switch req.Op {
	case agentwire.OpWait:
		res, err = a.wait(req.ID)
	case agentwire.OpSignal:
		err = a.signal(req.ID, req.Signal)
	case agentwire.OpKill:
		err = a.kill(req.ID)
	case agentwire.OpPs:
		res = &agentwire.Result{Procs: a.ps()}
	case agentwire.OpForget:
		err = a.forget(req.ID)
	case agentwire.OpStat:
		res, err = a.stat(req)
	case agentwire.OpRemove:
		err = a.remove(req)
	case agentwire.OpMkdir:
		err = a.mkdir(req)
	case agentwire.OpSockOwner:
		res, err = a.sockOwner(req)
	case agentwire.OpStatus:
		res = &agentwire.Result{Status: a.status()}
	}
	if err != nil {
		res = failResult(err)
	} else if res == nil {
		res = &agentwire.Result{}
	}
	return c.result(res) == nil
}
