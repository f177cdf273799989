package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"airlock/audit/schema"
	"airlock/client/wire"
)

// DefaultSocket is where `airlock serve` listens unless configured
// otherwise; AIRLOCK_SOCKET overrides it for clients.
const DefaultSocket = wire.DefaultSocket

// Client talks to one appliance. It is safe for concurrent use.
type Client struct {
	hc     *http.Client
	base   string
	token  string
	socket string
	err    error // set: every request fails with it (FromEnv's bad settings)
}

// New returns a client of the control API on a unix socket.
func New(socket string) *Client {
	d := net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConnsPerHost: 16,
	}
	return &Client{hc: &http.Client{Transport: tr}, base: "http://airlock", socket: socket}
}

// NewTCP returns a client of the control API over TCP with a bearer token.
// base is like "http://127.0.0.1:7443".
func NewTCP(base, token string) *Client {
	return &Client{hc: &http.Client{Transport: &http.Transport{Proxy: nil}}, base: base, token: token}
}

// FromEnv returns a client for AIRLOCK_URL (https://HOST:PORT, with
// AIRLOCK_TOKEN and, to check the certificate, AIRLOCK_CA_FILE or
// AIRLOCK_FINGERPRINT), else AIRLOCK_SOCKET, else DefaultSocket. A bad
// setting is reported by the client's first request.
func FromEnv() *Client {
	if s, ok := wire.SocketFromEnv(); ok {
		return New(s)
	}
	u := os.Getenv(EnvURL)
	c, err := NewRemote(u, os.Getenv(EnvToken), TLSOptions{CAFile: os.Getenv(EnvCAFile), Fingerprint: os.Getenv(EnvFingerprint)})
	if err != nil {
		return Failing(fmt.Errorf("%s: %w", EnvURL, err))
	}
	return c
}

// Socket is the unix socket the client uses ("" over TCP).
func (c *Client) Socket() string { return c.socket }

func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Request, error) {
	if c.err != nil {
		return nil, c.err
	}
	u := c.base + APIVersion + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// do sends a request and returns the response if it is a success;
// otherwise the API's *Error.
func (c *Client) do(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.explain(err)
	}
	if resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, decodeError(resp)
}

func (c *Client) explain(err error) error {
	if c.socket == "" {
		return fmt.Errorf("control API: %w", err)
	}
	var op *net.OpError
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("no airlock appliance at %s: start one with `airlock serve --config FILE`, or point AIRLOCK_SOCKET/--socket at its socket", c.socket)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("permission denied on %s: add your user to the airlock group (`usermod -aG airlock $USER`, then log in again) or run as root", c.socket)
	case errors.As(err, &op) && op.Op == "dial":
		return fmt.Errorf("cannot reach airlock at %s (%v): is `airlock serve` running?", c.socket, op.Err)
	}
	return fmt.Errorf("control API: %w", err)
}

func decodeError(resp *http.Response) error {
	return wire.DecodeError(resp.Body, resp.Status, resp.StatusCode, resp.Header.Get("X-Request-Id"))
}

// call sends JSON in (if non-nil) and decodes JSON into out (if non-nil).
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, path, nil, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("control API: bad response to %s %s: %w", method, path, err)
	}
	return nil
}

func sbPath(id string, rest string) string { return "/sandboxes/" + url.PathEscape(id) + rest }

// Health reports the appliance's state.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	return h, c.call(ctx, http.MethodGet, "/health", nil, &h)
}

// Create makes a sandbox and returns when it is ready to run commands.
func (c *Client) Create(ctx context.Context, req CreateRequest) (Sandbox, error) {
	var sb Sandbox
	return sb, c.call(ctx, http.MethodPost, "/sandboxes", req, &sb)
}

// List returns every sandbox.
func (c *Client) List(ctx context.Context) ([]Sandbox, error) {
	var sbs []Sandbox
	return sbs, c.call(ctx, http.MethodGet, "/sandboxes", nil, &sbs)
}

// Get returns one sandbox.
func (c *Client) Get(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	return sb, c.call(ctx, http.MethodGet, sbPath(id, ""), nil, &sb)
}

// Delete destroys a sandbox.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, sbPath(id, ""), nil, nil)
}

// Pause cuts a sandbox's network and stops its processes.
func (c *Client) Pause(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodPost, sbPath(id, "/pause"), nil, nil)
}

// Resume continues a paused sandbox and restores its network.
func (c *Client) Resume(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodPost, sbPath(id, "/resume"), nil, nil)
}

// Snapshot commits a sandbox to a local image.
func (c *Client) Snapshot(ctx context.Context, id string) (Snapshot, error) {
	var s Snapshot
	return s, c.call(ctx, http.MethodPost, sbPath(id, "/snapshot"), nil, &s)
}

// Diff lists what changed under /workspace since creation.
func (c *Client) Diff(ctx context.Context, id string) (Diff, error) {
	var d Diff
	return d, c.call(ctx, http.MethodGet, sbPath(id, "/diff"), nil, &d)
}

// Summary returns a sandbox's egress summary.
func (c *Client) Summary(ctx context.Context, id string) (Summary, error) {
	var s Summary
	return s, c.call(ctx, http.MethodGet, sbPath(id, "/summary"), nil, &s)
}

// Policies lists the loaded policies.
func (c *Client) Policies(ctx context.Context) ([]PolicyInfo, error) {
	var ps []PolicyInfo
	return ps, c.call(ctx, http.MethodGet, "/policies", nil, &ps)
}

// ReloadPolicies validates and reloads the policy directory.
func (c *Client) ReloadPolicies(ctx context.Context) (ReloadResult, error) {
	var r ReloadResult
	return r, c.call(ctx, http.MethodPost, "/policies/reload", nil, &r)
}

// Approvals lists held requests and recent decisions.
func (c *Client) Approvals(ctx context.Context) ([]Approval, error) {
	var as []Approval
	return as, c.call(ctx, http.MethodGet, "/approvals", nil, &as)
}

// Decide approves or denies a held request.
func (c *Client) Decide(ctx context.Context, id string, d Decision) (Approval, error) {
	var a Approval
	return a, c.call(ctx, http.MethodPost, "/approvals/"+url.PathEscape(id), d, &a)
}

// CopyIn uploads a tar stream and unpacks it into dir in the sandbox.
func (c *Client) CopyIn(ctx context.Context, id, dir string, tar io.Reader) error {
	req, err := c.newRequest(ctx, http.MethodPut, sbPath(id, "/files"), url.Values{"path": {dir}}, tar)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// CopyOut downloads path from the sandbox as a tar stream into w.
func (c *Client) CopyOut(ctx context.Context, id, path string, w io.Writer) error {
	req, err := c.newRequest(ctx, http.MethodGet, sbPath(id, "/files"), url.Values{"path": {path}}, nil)
	if err != nil {
		return err
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

// Exec runs a command, streaming its output to stdout and stderr, and
// returns how it ended. A command that exits non-zero is not an error.
func (c *Client) Exec(ctx context.Context, id string, er ExecRequest, stdout, stderr io.Writer) (ExecResult, error) {
	b, err := json.Marshal(er)
	if err != nil {
		return ExecResult{}, err
	}
	req, err := c.newRequest(ctx, http.MethodPost, sbPath(id, "/exec"), nil, bytes.NewReader(b))
	if err != nil {
		return ExecResult{}, err
	}
	resp, err := c.do(req)
	if err != nil {
		return ExecResult{}, err
	}
	defer resp.Body.Close()
	return wire.ReadExecStream(resp.Body, stdout, stderr)
}

// Logs calls fn for each audit event matching q, oldest first.
func (c *Client) Logs(ctx context.Context, q LogQuery, fn func(schema.Event) error) error {
	req, err := c.newRequest(ctx, http.MethodGet, "/logs", EncodeLogQuery(q), nil)
	if err != nil {
		return err
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return readLogStream(resp.Body, fn)
}

// FollowLogs calls fn for each audit event matching q as it is written,
// until ctx ends (then it returns nil), fn returns an error, or the
// appliance ends the stream. It starts after q.AfterSeq; 0 means after the
// newest event at the time of the call (run Logs first for the history,
// then follow from the last Seq it gave). q.Limit and q.Newest are ignored.
func (c *Client) FollowLogs(ctx context.Context, q LogQuery, fn func(schema.Event) error) error {
	q.Limit, q.Newest, q.UpToSeq = 0, false, 0
	v := EncodeLogQuery(q)
	v.Set("follow", "1")
	req, err := c.newRequest(ctx, http.MethodGet, "/logs", v, nil)
	if err != nil {
		return err
	}
	resp, err := c.do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer resp.Body.Close()
	err = readLogStream(resp.Body, fn)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// EncodeLogQuery turns a query into URL parameters (DecodeLogQuery's
// inverse).
func EncodeLogQuery(q LogQuery) url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("sandbox", q.Sandbox)
	set("kind", string(q.Kind))
	set("verdict", q.Verdict)
	set("category", q.Category)
	set("rule", q.Rule)
	set("host", q.Host)
	if !q.Since.IsZero() {
		v.Set("since", q.Since.Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.Format(time.RFC3339Nano))
	}
	if q.AfterSeq > 0 {
		v.Set("after_seq", strconv.FormatUint(q.AfterSeq, 10))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Newest {
		v.Set("newest", "true")
	}
	return v
}

// DecodeLogQuery parses URL parameters into a query.
func DecodeLogQuery(v url.Values) (LogQuery, error) {
	q := LogQuery{Sandbox: v.Get("sandbox"), Kind: schema.Kind(v.Get("kind")), Verdict: v.Get("verdict"),
		Category: v.Get("category"), Rule: v.Get("rule"), Host: v.Get("host"), Newest: v.Get("newest") == "true"}
	var err error
	parseTime := func(k string, t *time.Time) {
		if s := v.Get(k); s != "" && err == nil {
			if *t, err = time.Parse(time.RFC3339Nano, s); err != nil {
				err = Errorf(CodeInvalid, "%s: want an RFC 3339 time, got %q", k, s)
			}
		}
	}
	parseTime("since", &q.Since)
	parseTime("until", &q.Until)
	if s := v.Get("after_seq"); s != "" && err == nil {
		if q.AfterSeq, err = strconv.ParseUint(s, 10, 64); err != nil {
			err = Errorf(CodeInvalid, "after_seq: want a number, got %q", s)
		}
	}
	if s := v.Get("limit"); s != "" && err == nil {
		if q.Limit, err = strconv.Atoi(s); err != nil || q.Limit < 0 {
			err = Errorf(CodeInvalid, "limit: want a non-negative number, got %q", s)
		}
	}
	return q, err
}

func readLogStream(r io.Reader, fn func(schema.Event) error) error {
	dec := json.NewDecoder(bufio.NewReader(r))
	for {
		var line struct {
			schema.Event
			Error *Error `json:"error,omitempty"`
		}
		if err := dec.Decode(&line); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("log stream: %w", err)
		}
		if line.Error != nil {
			return line.Error
		}
		if err := fn(line.Event); err != nil {
			return err
		}
	}
}
