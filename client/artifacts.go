package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ArtifactFile is one file a sandbox left when it ended.
type ArtifactFile struct {
	Name string `json:"name"` // e.g. diff.patch, files/src/main.go, outputs/1-out.tar
	// Kind is patch, changes, file, output, commands, report or other.
	Kind   string `json:"kind"`
	Path   string `json:"path,omitempty"` // where it was in the sandbox
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Artifacts is what a sandbox left when it ended: the workspace diff and
// changed files, its declared outputs (as tar streams), its command records
// and its review report.
type Artifacts struct {
	Sandbox Sandbox        `json:"sandbox"`
	Reason  string         `json:"reason"` // why it ended
	Ended   time.Time      `json:"ended"`
	Bytes   int64          `json:"bytes"`
	Files   []ArtifactFile `json:"files"`
	Changes []Change       `json:"changes,omitempty"`
	Skipped []string       `json:"skipped,omitempty"` // not kept, and why (a bound, a missing path)
	Errors  []string       `json:"errors,omitempty"`  // export steps that failed
}

// Change is one changed path of a workspace diff.
type Change struct {
	Path   string `json:"path"`
	Kind   string `json:"kind"` // added | modified | deleted
	Binary bool   `json:"binary,omitempty"`
}

// Artifacts returns the manifest of what sandbox id left when it ended.
func (c *Client) Artifacts(ctx context.Context, id string) (Artifacts, error) {
	var a Artifacts
	return a, c.call(ctx, http.MethodGet, sbPath(id, "/artifacts"), nil, &a)
}

// Artifact writes one artifact (a name from the manifest) to w.
func (c *Client) Artifact(ctx context.Context, id, name string, w io.Writer) error {
	segs := strings.Split(name, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	req, err := c.newRequest(ctx, http.MethodGet, sbPath(id, "/artifacts/"+strings.Join(segs, "/")), nil, nil)
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

// ResetResult says what a reset replaced: the sandbox keeps its id,
// address and policy; its filesystem is the image's again.
type ResetResult struct {
	Sandbox      Sandbox `json:"sandbox"`
	OldContainer string  `json:"old_container"`
	NewContainer string  `json:"new_container"`
	ImageID      string  `json:"image_id"`
	DurationMS   int64   `json:"duration_ms"`
}

// Reset returns a sandbox to the state it was created in.
func (c *Client) Reset(ctx context.Context, id string) (ResetResult, error) {
	var r ResetResult
	return r, c.call(ctx, http.MethodPost, sbPath(id, "/reset"), nil, &r)
}
