package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/idemgate/idemgate/contract"
)

// Operation reads one operation of the caller's tenant, whole.
func (c *Client) Operation(ctx context.Context, id string) (*contract.View, error) {
	var v contract.View
	if _, err := c.do(ctx, http.MethodGet, "/operations/"+url.PathEscape(id), nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// OperationByKey reads the operation under key, whole, and the bytes the
// gateway sent (for a caller that shows the gateway's own words). No
// operation under the key is a not_found problem (IsNotFound).
func (c *Client) OperationByKey(ctx context.Context, key string) (*contract.View, json.RawMessage, error) {
	var v contract.View
	raw, err := c.do(ctx, http.MethodGet, "/operations?key="+url.QueryEscape(key), nil, &v)
	if err != nil {
		return nil, nil, err
	}
	return &v, raw, nil
}

// ListQuery selects a page of operations: by state ("" for any), from a
// cursor, at most Limit (0: the server's default).
type ListQuery struct {
	State string
	After string
	Limit int
}

// Operations reads one page of the tenant's operations, oldest first.
func (c *Client) Operations(ctx context.Context, q ListQuery) (*contract.ListView, error) {
	v := url.Values{}
	if q.State != "" {
		v.Set("state", q.State)
	}
	var lv contract.ListView
	if _, err := c.do(ctx, http.MethodGet, "/operations?"+page(v, q.After, q.Limit).Encode(), nil, &lv); err != nil {
		return nil, err
	}
	return &lv, nil
}

// Resolve settles an unknown operation (the caller needs the admin role)
// and returns it whole.
func (c *Client) Resolve(ctx context.Context, id string, r contract.ResolveRequest) (*contract.View, error) {
	var v contract.View
	if _, err := c.do(ctx, http.MethodPost, "/operations/"+url.PathEscape(id)+"/resolve", r, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// ResolveEffect settles an effect that waits for an operator, or whose
// delivery is unknown (the caller needs the admin role).
func (c *Client) ResolveEffect(ctx context.Context, id string, r contract.EffectResolveRequest) (*contract.EffectView, error) {
	var v contract.EffectView
	if _, err := c.do(ctx, http.MethodPost, "/effects/"+url.PathEscape(id)+"/resolve", r, &v); err != nil {
		return nil, err
	}
	return &v, nil
}
