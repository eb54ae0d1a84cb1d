package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

// Checkpoint reads the tenant's latest signed checkpoint, as signed note
// text (audit.ParseCheckpoint reads it). Before the first, it is a
// not_found problem (IsNotFound).
func (c *Client) Checkpoint(ctx context.Context) ([]byte, error) {
	return c.do(ctx, http.MethodGet, "/audit/checkpoint", nil, nil)
}

// Export streams the tenant's audit export (JSON Lines: the events, then
// the checkpoints) to w, and returns the bytes written (the caller needs
// the admin role). An export cut midway is an error, never a short
// export: verify it offline with `idemgate audit verify`.
func (c *Client) Export(ctx context.Context, w io.Writer) (int64, error) {
	resp, err := c.send(ctx, http.MethodGet, "/audit/export", nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer))
		return 0, refusal(resp, data)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("the export was cut after %d bytes: %w", n, err)
	}
	return n, nil
}
