package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// ExposeRequest asks for a preview of a sandbox port (POST
// /v1/sandboxes/{id}/previews).
type ExposeRequest struct {
	Port int      `json:"port"`
	TTL  string   `json:"ttl,omitempty"` // a duration ("30m"); "": the appliance's default
	To   []string `json:"to,omitempty"`  // principals who may open it; empty: the caller
	Name string   `json:"name,omitempty"`
}

// Preview is an exposed sandbox port on the preview listener.
type Preview struct {
	ID      string    `json:"id"`
	Sandbox string    `json:"sandbox"`
	Port    int       `json:"port"`
	Name    string    `json:"name,omitempty"`
	To      []string  `json:"to"`
	By      string    `json:"by"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
	URL     string    `json:"url"` // without a token: opens with a bearer token only
	// Links are one-time URLs, one per principal in To, that set the
	// preview's cookie on first use (only in the answer to Expose).
	Links map[string]string `json:"links,omitempty"`
}

// Expose creates a preview of a sandbox port.
func (c *Client) Expose(ctx context.Context, id string, req ExposeRequest) (Preview, error) {
	var p Preview
	return p, c.call(ctx, http.MethodPost, sbPath(id, "/previews"), req, &p)
}

// Previews lists the live previews of a sandbox.
func (c *Client) Previews(ctx context.Context, id string) ([]Preview, error) {
	var ps []Preview
	return ps, c.call(ctx, http.MethodGet, sbPath(id, "/previews"), nil, &ps)
}

// Unexpose revokes a preview; its open connections are closed.
func (c *Client) Unexpose(ctx context.Context, id, preview string) error {
	return c.call(ctx, http.MethodDelete, sbPath(id, "/previews/"+url.PathEscape(preview)), nil, nil)
}
