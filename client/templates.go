package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"time"
)

// TemplateRequest builds a template: a sandbox from From under Policy runs
// Setup (shell lines, in order, egress decided and logged as for any
// sandbox); its filesystem is committed as NAME:vN.
type TemplateRequest struct {
	Name   string   `json:"name"`
	From   string   `json:"from"`
	Setup  []string `json:"setup,omitempty"`
	Policy string   `json:"policy,omitempty"` // "" = the appliance's default
	// FromSandbox makes the template from a running sandbox's snapshot
	// instead (From, Setup and Policy must be empty); the record holds its
	// change summary and warnings for what looks sensitive.
	FromSandbox string `json:"from_sandbox,omitempty"`
}

// SnapshotSummary is what a template made from a sandbox holds.
type SnapshotSummary struct {
	Added    int      `json:"added"`
	Modified int      `json:"modified"`
	Deleted  int      `json:"deleted"`
	Paths    []string `json:"paths"`
	// Warnings name changed paths that look like credentials, shell
	// history, browser profiles or logs.
	Warnings []string `json:"warnings,omitempty"`
}

// TemplateStep is one setup command of a build and how it ended.
type TemplateStep struct {
	Command    string `json:"command"`
	ExitCode   int    `json:"exit_code"`
	DurationMS int64  `json:"duration_ms"`
	TimedOut   bool   `json:"timed_out,omitempty"`
}

// Template is one recorded template version.
type Template struct {
	Name        string           `json:"name"`
	Version     int              `json:"version"`
	Ref         string           `json:"ref"` // NAME:vN
	Image       string           `json:"image"`
	ImageID     string           `json:"image_id"`
	From        string           `json:"from"`
	FromImageID string           `json:"from_image_id"`
	Setup       []TemplateStep   `json:"setup"`
	Policy      string           `json:"policy"`
	PolicyHash  string           `json:"policy_hash,omitempty"`
	Sandbox     string           `json:"sandbox"` // the build sandbox: its events and artifacts
	Created     time.Time        `json:"created"`
	Snapshot    *SnapshotSummary `json:"snapshot,omitempty"`
}

// BuildTemplate builds a template version. A failing setup command is an
// error (code invalid) naming the command, its exit code, its output and
// what the policy denied meanwhile; no template is left.
func (c *Client) BuildTemplate(ctx context.Context, req TemplateRequest) (Template, error) {
	var t Template
	return t, c.call(ctx, http.MethodPost, "/templates", req, &t)
}

// Templates lists every template version.
func (c *Client) Templates(ctx context.Context) ([]Template, error) {
	var ts []Template
	return ts, c.call(ctx, http.MethodGet, "/templates", nil, &ts)
}

// Template returns "NAME" (the newest version) or "NAME:vN".
func (c *Client) Template(ctx context.Context, ref string) (Template, error) {
	var t Template
	return t, c.call(ctx, http.MethodGet, "/templates/"+url.PathEscape(ref), nil, &t)
}

// TemplateLog writes a template version's build log to w.
func (c *Client) TemplateLog(ctx context.Context, ref string, w io.Writer) error {
	req, err := c.newRequest(ctx, http.MethodGet, "/templates/"+url.PathEscape(ref)+"/log", nil, nil)
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

// RemoveTemplate removes "NAME:vN" or every version of NAME, and returns
// the versions removed.
func (c *Client) RemoveTemplate(ctx context.Context, ref string) ([]string, error) {
	var out []string
	return out, c.call(ctx, http.MethodDelete, "/templates/"+url.PathEscape(ref), nil, &out)
}
