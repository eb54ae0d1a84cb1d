package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/idemgate/idemgate/contract"
)

// ApprovalQuery selects a page of approvals: by status ("" for any), from
// a cursor, at most Limit (0: the server's default).
type ApprovalQuery struct {
	Status string
	After  string
	Limit  int
}

// Approvals reads one page of the tenant's approvals, oldest first.
func (c *Client) Approvals(ctx context.Context, q ApprovalQuery) (*contract.ApprovalListView, error) {
	v := url.Values{}
	if q.Status != "" {
		v.Set("status", q.Status)
	}
	var lv contract.ApprovalListView
	if _, err := c.do(ctx, http.MethodGet, "/approvals?"+page(v, q.After, q.Limit).Encode(), nil, &lv); err != nil {
		return nil, err
	}
	if lv.Approvals == nil {
		lv.Approvals = []*contract.ApprovalView{}
	}
	return &lv, nil
}

// Approval reads one approval, whole: what an approver must see before
// deciding, its fingerprint among it.
func (c *Client) Approval(ctx context.Context, id string) (*contract.ApprovalView, error) {
	var v contract.ApprovalView
	if _, err := c.do(ctx, http.MethodGet, "/approvals/"+url.PathEscape(id), nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Approve grants an approval, echoing the fingerprint the approver was
// shown; the gateway refuses a decision for any other (approval_mismatch).
func (c *Client) Approve(ctx context.Context, id string, d contract.Decision) (*contract.ApprovalView, error) {
	return c.decide(ctx, id, "approve", d)
}

// Deny refuses an approval as Approve grants one; the operation fails.
func (c *Client) Deny(ctx context.Context, id string, d contract.Decision) (*contract.ApprovalView, error) {
	return c.decide(ctx, id, "deny", d)
}

func (c *Client) decide(ctx context.Context, id, verb string, d contract.Decision) (*contract.ApprovalView, error) {
	var v contract.ApprovalView
	path := "/approvals/" + url.PathEscape(id) + "/" + verb
	if _, err := c.do(ctx, http.MethodPost, path, d, &v); err != nil {
		return nil, err
	}
	return &v, nil
}
