package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
)

// Explanation is a policy's verdict on one request and the rules it
// considered (GET /v1/policies/explain; `airlock policy explain` offline).
type Explanation struct {
	Policy   string `json:"policy"`
	Request  string `json:"request"`
	Action   string `json:"action"` // allow | deny | ask | audit
	Category string `json:"category,omitempty"`
	Rule     string `json:"rule"`
	Reason   string `json:"reason"`
	// WouldDeny is set on an audit verdict that enforce mode would deny.
	WouldDeny  bool            `json:"would_deny,omitempty"`
	Considered []Consideration `json:"considered,omitempty"`
}

// Consideration is one rule the policy looked at and what came of it.
type Consideration struct {
	Rule    string `json:"rule"`
	Outcome string `json:"outcome"`
}

// AccessRequest asks a human for access to a destination on behalf of a
// sandbox (POST /v1/sandboxes/{id}/access). It is held like a request the
// policy says to ask about, and decided with `airlock approve` or `deny`.
type AccessRequest struct {
	Destination string `json:"destination"`      // host, host:port or a URL
	Reason      string `json:"reason,omitempty"` // why the agent needs it, for the person deciding
}

// Explain asks the appliance how policy ("" = its default policy) decides
// request, a line like `airlock policy explain` takes ("GET https://host/p",
// "dns NAME [TYPE]", "connect HOST:PORT").
func (c *Client) Explain(ctx context.Context, policy, request string) (Explanation, error) {
	var ex Explanation
	q := url.Values{"request": {request}}
	if policy != "" {
		q.Set("policy", policy)
	}
	return ex, c.call(ctx, http.MethodGet, "/policies/explain?"+q.Encode(), nil, &ex)
}

// RequestAccess files an access request for a sandbox; the approval it
// returns is "held" until a person decides or it expires.
func (c *Client) RequestAccess(ctx context.Context, id string, req AccessRequest) (Approval, error) {
	var a Approval
	return a, c.call(ctx, http.MethodPost, sbPath(id, "/access"), req, &a)
}

// Report writes a sandbox's review report (HTML, or Markdown) to w.
func (c *Client) Report(ctx context.Context, id string, html bool, w io.Writer) error {
	format := "markdown"
	if html {
		format = "html"
	}
	req, err := c.newRequest(ctx, http.MethodGet, sbPath(id, "/report"), url.Values{"format": {format}}, nil)
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
