package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"airlock/client/wire"
)

func procPath(id, execID, rest string) string {
	return sbPath(id, "/processes/"+url.PathEscape(execID)+rest)
}

// Processes lists the commands of a sandbox (running, and finished ones
// whose record is not written yet).
func (c *Client) Processes(ctx context.Context, id string) ([]Process, error) {
	var ps []Process
	return ps, c.call(ctx, http.MethodGet, sbPath(id, "/processes"), nil, &ps)
}

// Kill ends a command and everything it spawned.
func (c *Client) Kill(ctx context.Context, id, execID string) error {
	return c.call(ctx, http.MethodPost, procPath(id, execID, "/kill"), nil, nil)
}

// Signal sends a signal to a command's main process.
func (c *Client) Signal(ctx context.Context, id, execID, sig string) error {
	return c.call(ctx, http.MethodPost, procPath(id, execID, "/signal"), Signal{Signal: sig}, nil)
}

// Attach streams a command's kept output, then its live output, until it
// ends (or ctx ends: the command goes on).
func (c *Client) Attach(ctx context.Context, id, execID string, stdout, stderr io.Writer) (ExecResult, error) {
	req, err := c.newRequest(ctx, http.MethodGet, procPath(id, execID, "/attach"), nil, nil)
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

// ReadFile writes a sandbox file's contents to w.
func (c *Client) ReadFile(ctx context.Context, id, path string, w io.Writer) (int64, error) {
	req, err := c.newRequest(ctx, http.MethodGet, sbPath(id, "/fs/file"), url.Values{"path": {path}}, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("read %s: %w", path, err)
	}
	if want := resp.ContentLength; want >= 0 && n != want {
		return n, fmt.Errorf("read %s: got %d of %d bytes", path, n, want)
	}
	return n, nil
}

// WriteFile writes size bytes from r to path in the sandbox, atomically,
// with permission bits mode (0: 0644).
func (c *Client) WriteFile(ctx context.Context, id, path string, mode uint32, size int64, r io.Reader) (FileInfo, error) {
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", "0"+strconv.FormatUint(uint64(mode), 8))
	}
	req, err := c.newRequest(ctx, http.MethodPut, sbPath(id, "/fs/file"), q, r)
	if err != nil {
		return FileInfo{}, err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.do(req)
	if err != nil {
		return FileInfo{}, err
	}
	defer resp.Body.Close()
	var fi FileInfo
	if err := decodeJSON(resp.Body, &fi); err != nil {
		return FileInfo{}, fmt.Errorf("write %s: %w", path, err)
	}
	return fi, nil
}

// ListDir lists a directory of the sandbox.
func (c *Client) ListDir(ctx context.Context, id, path string) ([]FileInfo, error) {
	var out []FileInfo
	return out, c.call(ctx, http.MethodGet, sbPath(id, "/fs/list?path="+url.QueryEscape(path)), nil, &out)
}

// Stat describes one path (a symlink itself, not its target).
func (c *Client) Stat(ctx context.Context, id, path string) (FileInfo, error) {
	var fi FileInfo
	return fi, c.call(ctx, http.MethodGet, sbPath(id, "/fs/stat?path="+url.QueryEscape(path)), nil, &fi)
}

// Remove removes a file, an empty directory, or with recursive a tree.
func (c *Client) Remove(ctx context.Context, id, path string, recursive bool) error {
	return c.call(ctx, http.MethodDelete, sbPath(id, "/fs/file?path="+url.QueryEscape(path)+"&recursive="+strconv.FormatBool(recursive)), nil, nil)
}

// Mkdir makes a directory (with parents: and its missing parents).
func (c *Client) Mkdir(ctx context.Context, id, path string, parents bool) error {
	return c.call(ctx, http.MethodPost, sbPath(id, "/fs/mkdir?path="+url.QueryEscape(path)+"&parents="+strconv.FormatBool(parents)), nil, nil)
}

func decodeJSON(r io.Reader, v any) error {
	if err := json.NewDecoder(r).Decode(v); err != nil {
		return fmt.Errorf("control API: bad response: %w", err)
	}
	return nil
}
