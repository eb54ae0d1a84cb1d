package client

import (
	"context"
	"net/http"

	"github.com/idemgate/idemgate/contract"
)

// Reload asks the gateway to re-read its configuration file (the caller
// needs the admin role). A file the gateway refused is a *contract.Problem
// (invalid_request) whose detail names the file and line; the gateway
// then keeps the configuration it runs.
func (c *Client) Reload(ctx context.Context) (*contract.ReloadView, error) {
	var v contract.ReloadView
	if _, err := c.do(ctx, http.MethodPost, "/config/reload", nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}
