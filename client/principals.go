package client

import (
	"context"
	"net/http"
)

// PrincipalsReload is the answer to a principals reload: the principals
// now admitted by the TCP listener (names only).
type PrincipalsReload struct {
	Principals []string `json:"principals"`
}

// ReloadPrincipals asks the appliance to re-read its principals file
// (admin only); a broken file is refused and the running principals stay.
func (c *Client) ReloadPrincipals(ctx context.Context) (PrincipalsReload, error) {
	var out PrincipalsReload
	err := c.call(ctx, http.MethodPost, "/principals/reload", nil, &out)
	return out, err
}
