package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/contract"
)

// The actions API (docs/design.md, "Actions"): an effect the caller
// performs itself, reserved before it starts and ended by a fenced owner
// step. These are its five calls, one request each, with nothing retried:
// Act (act.go) is the policy built on them.

// Reservation is what a reserve answered when it did not refuse: a grant
// (201, the caller owns the effect under Grant.Lease) or a replay (200, the
// operation is final and Replay.Result is what was recorded).
type Reservation struct {
	Grant  *contract.ActionGrant
	Replay *contract.ActionReplay
	// DuplicateOf names the operation a business-key duplicate was answered
	// from (Idempotency-Duplicate-Of), on a replay.
	DuplicateOf string
}

// ApprovalPending is a reserve answered 202: the action waits for a human
// decision, nothing may be performed yet, and the same reserve (same key,
// same command) runs it once it is approved.
type ApprovalPending struct {
	contract.Accepted
}

func (e *ApprovalPending) Error() string {
	return fmt.Sprintf("%s: operation %s waits for approval %s (%s)", e.Code, e.OperationID, e.Approval.ID, e.Detail)
}

// Reserve reserves action name under key with command (JSON; nil is the
// command null). wait > 0 asks the gateway to hold the answer while
// another owner runs the operation (Prefer: wait, whole seconds, at most
// 60). A refusal is the *contract.Problem the gateway answered, with
// RetryAfter read from its header; a 202 is an *ApprovalPending.
func (c *Client) Reserve(ctx context.Context, name, key string, command json.RawMessage, wait time.Duration) (*Reservation, error) {
	if !contract.ValidActionName(name) {
		return nil, fmt.Errorf("action %q: want [a-z0-9][a-z0-9._-]{0,127}", name)
	}
	if command == nil {
		command = json.RawMessage("null")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/actions/"+url.PathEscape(name), bytes.NewReader(command))
	if err != nil {
		return nil, err
	}
	req.Header.Set(contract.HeaderKey, key)
	req.Header.Set("Content-Type", "application/json")
	if s := int(wait / time.Second); s > 0 {
		req.Header.Set(contract.HeaderPrefer, "wait="+strconv.Itoa(min(s, 60)))
	}
	resp, data, err := c.roundTrip(req)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusCreated:
		var g contract.ActionGrant
		if err := json.Unmarshal(data, &g); err != nil || g.Lease.Token == "" {
			return nil, fmt.Errorf("the gateway's 201 carried no lease (%v)", err)
		}
		return &Reservation{Grant: &g}, nil
	case http.StatusOK:
		var r contract.ActionReplay
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("the gateway's replay: %w", err)
		}
		return &Reservation{Replay: &r, DuplicateOf: resp.Header.Get(contract.HeaderDuplicateOf)}, nil
	case http.StatusAccepted:
		var a ApprovalPending
		if err := json.Unmarshal(data, &a.Accepted); err != nil {
			return nil, fmt.Errorf("the gateway's 202: %w", err)
		}
		return nil, &a
	}
	return nil, refusal(resp, data)
}

// Heartbeat extends the lease of an owned operation by the action's lease;
// the answer's Lease carries the new end (without the token).
func (c *Client) Heartbeat(ctx context.Context, op string, lease contract.LeaseView) (*contract.StepAnswer, error) {
	return c.ownerStep(ctx, op, contract.StepHeartbeat, contract.OwnerStep{Token: lease.Token, Fence: lease.Fence})
}

// Complete records an owned effect's outcome: state "succeeded" or
// "failed", its result (JSON, or nil for none) and its reference in the
// world.
func (c *Client) Complete(ctx context.Context, op string, lease contract.LeaseView, state string, result json.RawMessage, ref string) (*contract.StepAnswer, error) {
	return c.ownerStep(ctx, op, contract.StepComplete, contract.OwnerStep{Token: lease.Token, Fence: lease.Fence,
		State: state, Result: result, ResultRef: ref})
}

// Release says an owned effect was definitely not performed: the next
// reserve with the key runs it again.
func (c *Client) Release(ctx context.Context, op string, lease contract.LeaseView, reason string) (*contract.StepAnswer, error) {
	return c.ownerStep(ctx, op, contract.StepRelease, contract.OwnerStep{Token: lease.Token, Fence: lease.Fence, Reason: reason})
}

// MarkUnknown says an owned effect may have happened: nobody runs it again
// until a probe or an operator settles it.
func (c *Client) MarkUnknown(ctx context.Context, op string, lease contract.LeaseView, reason string) (*contract.StepAnswer, error) {
	return c.ownerStep(ctx, op, contract.StepUnknown, contract.OwnerStep{Token: lease.Token, Fence: lease.Fence, Reason: reason})
}

func (c *Client) ownerStep(ctx context.Context, op, step string, body contract.OwnerStep) (*contract.StepAnswer, error) {
	var a contract.StepAnswer
	if _, err := c.do(ctx, http.MethodPost, "/operations/"+url.PathEscape(op)+"/"+step, body, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// roundTrip sends req as the client's principal and reads its answer; an
// answer that is a problem gets its Retry-After.
func (c *Client) roundTrip(req *http.Request) (*http.Response, []byte, error) {
	resp, err := c.sendRequest(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer))
	if err != nil {
		return nil, nil, fmt.Errorf("read the answer: %w", err)
	}
	return resp, data, nil
}

// RetryAfter is how long a refusal asks the caller to wait (its
// Retry-After), 0 when it names no time.
func RetryAfter(err error) time.Duration {
	var p *contract.Problem
	if errors.As(err, &p) {
		return time.Duration(p.RetryAfter) * time.Second
	}
	return 0
}

// MaxKey is the longest key the gateway takes, in bytes.
const MaxKey = 255

// KeyOf is a key built from stable identifiers (an engine's name, a
// workflow's id, a step's): each part path-escaped, so that no part can
// pass for two and the key is printable ASCII, joined by "/". A key that
// would be longer than MaxKey is parts[0] and the SHA-256 of that text
// instead: the same parts always give the same key.
func KeyOf(parts ...string) string {
	esc := make([]string, len(parts))
	for i, p := range parts {
		esc[i] = url.PathEscape(p)
	}
	k := strings.Join(esc, "/")
	if len(k) <= MaxKey {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	head := ""
	if len(esc) > 0 && len(esc[0]) <= 64 {
		head = esc[0] + "/"
	}
	return head + "sha256:" + hex.EncodeToString(sum[:])
}
