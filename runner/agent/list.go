package agent

import (
	"context"
	"fmt"

	"airlock/internal/agentwire"
)

// MaxListing bounds the entries of one directory listing taken from an
// agent (the agent's own bound).
const MaxListing = 100000

// List reads a directory's entries, streamed in data frames (an agent of
// an earlier build puts them in the Result instead: taken too). max bounds
// the entries (0: MaxListing).
func (c *Client) List(ctx context.Context, path string, max int) ([]agentwire.FileInfo, error) {
	if max <= 0 || max > MaxListing {
		max = MaxListing
	}
	req := request(&agentwire.Request{Op: agentwire.OpList, Path: path, Max: int64(max)})
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
		return nil, fmt.Errorf("agent: send list: %w", err)
	}
	var out []agentwire.FileInfo
	ended := false
	res, err := readResult(w, func(t agentwire.Type, p []byte) error {
		switch {
		case t == agentwire.TData && !ended:
			fs, err := agentwire.DecodeEntries(p)
			if err != nil {
				return fmt.Errorf("agent: list %s: %w", path, err)
			}
			if len(out)+len(fs) > max {
				return fmt.Errorf("agent: list %s: sent more than the %d entries asked for", path, max)
			}
			out = append(out, fs...)
		case t == agentwire.TDataEnd && !ended:
			ended = true
		default:
			return fmt.Errorf("agent: unexpected %s frame in a list", t)
		}
		return nil
	})
	if err != nil {
		w.c.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("agent: list: %w", context.Cause(ctx))
		}
		return nil, err
	}
	c.put(w)
	if err := remote(res); err != nil {
		return nil, err
	}
	if len(out)+len(res.Files) > max {
		return nil, fmt.Errorf("agent: list %s: sent more than the %d entries asked for", path, max)
	}
	return append(out, res.Files...), nil
}
