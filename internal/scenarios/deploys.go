package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/contract"
)

// Digests of the deploy acts: immutable artifacts.
const (
	DigestStaging = "sha256:4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b"
	DigestProd    = "sha256:9f2c1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b"
	DigestOther   = "sha256:0d3e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b"
)

// Deployment is a deployment's body for billing.
func Deployment(environment, artifact string) string {
	return fmt.Sprintf(`{"service":"billing","environment":%q,"artifact":%q}`, environment, artifact)
}

// MutableRef: a branch name is refused by the API (it may point elsewhere
// by the time it deploys); a digest deploys.
func MutableRef(ctx context.Context, e *Env, s *State) error {
	r, err := e.Post(ctx, s, "/v1/deployments", s.Key("deploy-main"), Deployment("staging", "main"))
	if err != nil {
		return err
	}
	var refusal struct{ Error string }
	_ = json.Unmarshal([]byte(r.Body), &refusal)
	if r.Status != 422 {
		return fmt.Errorf("artifact main: %d %s", r.Status, r.Body)
	}
	e.Say("artifact main -> 422: %s", refusal.Error)
	if r, err = e.Post(ctx, s, "/v1/deployments", s.Key("deploy-digest"), Deployment("staging", DigestStaging)); err != nil {
		return err
	}
	if r.Status != 201 {
		return fmt.Errorf("artifact digest: %d %s", r.Status, r.Body)
	}
	e.Say("artifact %s... -> 201, deployment #%d started", DigestStaging[:19], r.ID())
	return nil
}

// ApprovedDeploy: a production deploy waits for a human, nothing deployed
// meanwhile; the approver decides on the fingerprint she is shown; the
// agent's retry deploys it once; the same key with another artifact is
// refused, and a new key with it asks again, which the approver denies.
func ApprovedDeploy(ctx context.Context, e *Env, s *State) error {
	key, before := s.Key("deploy-prod"), e.Effects(ctx)["deployments_started"]
	acc, err := e.awaiting(ctx, s, key, DigestProd)
	if err != nil {
		return err
	}
	e.Say("POST /v1/deployments (production) -> 202 %s: %q; nothing deployed", acc.Code, acc.Approval.Summary)
	if again, err := e.awaiting(ctx, s, key, DigestProd); err != nil || again.Approval.ID != acc.Approval.ID {
		return fmt.Errorf("the retry should wait for the same approval: %v %+v", err, again)
	}
	e.Say("retry, same key -> 202 again, the same approval %s: a retry never asks twice", acc.Approval.ID)
	a, err := e.decide(ctx, acc.Approval.ID, "approve")
	if err != nil {
		return err
	}
	if after := e.Effects(ctx)["deployments_started"]; after != before {
		return fmt.Errorf("%d deployments started before the agent's retry", after-before)
	}
	e.Say("alice (approver) reads it and approves fingerprint %s…: %s", a.Fingerprint[:19], a.Status)
	run, err := e.Post(ctx, s, "/v1/deployments", key, Deployment("production", DigestProd))
	if err != nil || run.Status != 201 {
		return fmt.Errorf("retry after the approval: %v %d %s", err, run.Status, run.Body)
	}
	e.Say("agent retries, same key -> 201, deployment #%d started; the approval is now used", run.ID())
	swapped, err := e.Post(ctx, s, "/v1/deployments", key, Deployment("production", DigestOther))
	if code := swapped.Problem().Code; err != nil || swapped.Status != 422 || code != contract.CodeFingerprintMismatch {
		return fmt.Errorf("another artifact under the approved key: %v %d %s", err, swapped.Status, swapped.Body)
	}
	e.Say("same key, another artifact -> 422 %s: the consent was for one command", contract.CodeFingerprintMismatch)
	return e.secondApproval(ctx, s, acc.Approval.ID)
}

// secondApproval: a new key with the other artifact asks again; the
// approver denies it, and the agent's retry is told so.
func (e *Env) secondApproval(ctx context.Context, s *State, firstApproval string) error {
	key := s.Key("deploy-prod-2")
	acc, err := e.awaiting(ctx, s, key, DigestOther)
	if err != nil || acc.Approval.ID == firstApproval {
		return fmt.Errorf("a new key should open a new approval: %v %+v", err, acc)
	}
	e.Say("new key, that artifact -> 202, a new approval %s", acc.Approval.ID)
	if _, err := e.decide(ctx, acc.Approval.ID, "deny"); err != nil {
		return err
	}
	r, err := e.Post(ctx, s, "/v1/deployments", key, Deployment("production", DigestOther))
	if code := r.Problem().Code; err != nil || r.Status != 403 || code != contract.CodeApprovalDenied {
		return fmt.Errorf("retry after the denial: %v %d %s", err, r.Status, r.Body)
	}
	e.Say("alice denies it; the agent's retry -> 403 %s, nothing deployed", contract.CodeApprovalDenied)
	return nil
}

// awaiting deploys artifact to production under key and reads the 202
// that waits for an approval.
func (e *Env) awaiting(ctx context.Context, s *State, key, artifact string) (contract.Accepted, error) {
	var acc contract.Accepted
	r, err := e.Post(ctx, s, "/v1/deployments", key, Deployment("production", artifact))
	if err != nil {
		return acc, err
	}
	if r.Status != 202 || json.Unmarshal([]byte(r.Body), &acc) != nil || acc.Approval.ID == "" {
		return acc, fmt.Errorf("want 202 waiting for an approval, got %d %s", r.Status, r.Body)
	}
	return acc, nil
}

// decide is the approver's part, through the control API's typed client:
// read the approval, then decide on the fingerprint it shows.
func (e *Env) decide(ctx context.Context, id, verb string) (*contract.ApprovalView, error) {
	c, err := e.control(e.ApproverToken)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	a, err := c.Approval(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("read approval %s: %w", id, err)
	}
	decide := c.Approve
	if verb == "deny" {
		decide = c.Deny
	}
	if a, err = decide(ctx, id, contract.Decision{Fingerprint: a.Fingerprint, Note: "checked the artifact"}); err != nil {
		return nil, fmt.Errorf("%s %s: %w", verb, id, err)
	}
	return a, nil
}
