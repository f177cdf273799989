package client

import (
	"context"
	"net/http"
	"time"
)

// LockdownRequest engages (Lift false) or lifts the kill switch, for every
// sandbox or (Sandbox set) one. Reason is required.
type LockdownRequest struct {
	Sandbox string `json:"sandbox,omitempty"`
	Lift    bool   `json:"lift,omitempty"`
	Reason  string `json:"reason"`
}

// LockdownEntry says who cut the network and why.
type LockdownEntry struct {
	Sandbox string    `json:"sandbox,omitempty"` // absent: every sandbox
	By      string    `json:"by"`
	Reason  string    `json:"reason"`
	Since   time.Time `json:"since"`
}

// LockdownState is GET /v1/lockdown: the global switch (nil when off) and
// the sandboxes blocked one by one.
type LockdownState struct {
	All       *LockdownEntry  `json:"all,omitempty"`
	Sandboxes []LockdownEntry `json:"sandboxes"`
}

// Lockdown returns the kill switch's state.
func (c *Client) Lockdown(ctx context.Context) (LockdownState, error) {
	var s LockdownState
	return s, c.call(ctx, http.MethodGet, "/lockdown", nil, &s)
}

// SetLockdown engages or lifts the kill switch and returns the new state.
func (c *Client) SetLockdown(ctx context.Context, req LockdownRequest) (LockdownState, error) {
	var s LockdownState
	return s, c.call(ctx, http.MethodPost, "/lockdown", req, &s)
}
