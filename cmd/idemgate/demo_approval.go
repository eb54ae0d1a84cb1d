package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/httpidem"
)

// demoApprovedDeploy: a production deploy waits for a human; the approver
// decides on the fingerprint she is shown; the agent's retry deploys it
// once; the same key with another artifact is refused, and a new key with
// it asks again, which the approver denies.
func demoApprovedDeploy(ctx context.Context, e *demoEnv, s *demoState) error {
	deploy := func(key, artifact string) (demoReply, error) {
		return e.post(ctx, s, "/v1/deployments", key,
			fmt.Sprintf(`{"service":"billing","environment":"production","artifact":%q}`, artifact))
	}
	key, digest := "deploy-prod-"+s.run, "sha256:9f2c1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b"
	first, err := deploy(key, digest)
	acc, aerr := demoAccepted(first, err)
	if aerr != nil {
		return aerr
	}
	e.say("POST /v1/deployments (production) -> 202 %s: %q; nothing deployed", acc.Code, acc.Approval.Summary)
	again, err := deploy(key, digest)
	if retry, err := demoAccepted(again, err); err != nil || retry.Approval.ID != acc.Approval.ID {
		return fmt.Errorf("the retry should wait for the same approval: %v %s", err, again.body)
	}
	e.say("retry, same key -> 202 again, the same approval %s: a retry never asks twice", acc.Approval.ID)
	a, err := e.decide(ctx, acc.Approval.ID, "approve")
	if err != nil {
		return err
	}
	e.say("alice (approver) reads it and approves fingerprint %s…: %s", a.Fingerprint[:19], a.Status)
	run, err := deploy(key, digest)
	if err != nil || run.status != 201 {
		return fmt.Errorf("retry after the approval: %v %d %s", err, run.status, run.body)
	}
	e.say("agent retries, same key -> 201, deployment #%d started; the approval is now used", run.id())
	other := "sha256:0d3e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b"
	swapped, err := deploy(key, other)
	if code, _ := swapped.problem(); err != nil || swapped.status != 422 || code != "fingerprint_mismatch" {
		return fmt.Errorf("another artifact under the approved key: %v %d %s", err, swapped.status, swapped.body)
	}
	e.say("same key, another artifact -> 422 fingerprint_mismatch: the consent was for one command")
	return demoSecondApproval(ctx, e, s, deploy, other, acc.Approval.ID)
}

// demoSecondApproval: a new key with the other artifact asks again; the
// approver denies it, and the agent's retry is told so.
func demoSecondApproval(ctx context.Context, e *demoEnv, s *demoState, deploy func(string, string) (demoReply, error),
	artifact, firstApproval string) error {
	key := "deploy-prod-2-" + s.run
	r, err := deploy(key, artifact)
	acc, err := demoAccepted(r, err)
	if err != nil || acc.Approval.ID == firstApproval {
		return fmt.Errorf("a new key should open a new approval: %v %s", err, r.body)
	}
	e.say("new key, that artifact -> 202, a new approval %s", acc.Approval.ID)
	if _, err := e.decide(ctx, acc.Approval.ID, "deny"); err != nil {
		return err
	}
	r, err = deploy(key, artifact)
	if code, _ := r.problem(); err != nil || r.status != 403 || code != "approval_denied" {
		return fmt.Errorf("retry after the denial: %v %d %s", err, r.status, r.body)
	}
	e.say("alice denies it; the agent's retry -> 403 approval_denied, nothing deployed")
	return nil
}

// demoAccepted reads a 202 that waits for an approval.
func demoAccepted(r demoReply, err error) (httpidem.Accepted, error) {
	var acc httpidem.Accepted
	if err != nil {
		return acc, err
	}
	if r.status != 202 || json.Unmarshal([]byte(r.body), &acc) != nil || acc.Approval.ID == "" {
		return acc, fmt.Errorf("want 202 waiting for an approval, got %d %s", r.status, r.body)
	}
	return acc, nil
}

// decide is the approver's part: read the approval, then decide on the
// fingerprint it shows.
func (e *demoEnv) decide(ctx context.Context, id, verb string) (*contract.ApprovalView, error) {
	auth := []string{"Authorization", "Bearer " + demoApproverToken}
	r, err := e.send(ctx, nil, 5*time.Second, "GET", e.gwURL+"/_idem/v1/approvals/"+id, "", auth...)
	var a contract.ApprovalView
	if err != nil || r.status != 200 || json.Unmarshal([]byte(r.body), &a) != nil {
		return nil, fmt.Errorf("read approval %s: %v %d %s", id, err, r.status, r.body)
	}
	body, _ := json.Marshal(httpidem.Decision{Fingerprint: a.Fingerprint, Note: "demo: checked the artifact"})
	r, err = e.send(ctx, nil, 5*time.Second, "POST", e.gwURL+"/_idem/v1/approvals/"+id+"/"+verb, string(body), auth...)
	if err != nil || r.status != 200 || json.Unmarshal([]byte(r.body), &a) != nil {
		return nil, fmt.Errorf("%s %s: %v %d %s", verb, id, err, r.status, r.body)
	}
	return &a, nil
}
