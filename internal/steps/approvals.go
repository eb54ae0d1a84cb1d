package steps

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// Decision is one guarded change of a pending approval: to approved (its
// operation stays prepared, now executable) or to denied (its operation
// fails in the same statement).
type Decision struct {
	ID          string
	Tenant      string
	Fingerprint string
	Status      ledger.ApprovalStatus // ApprovalApproved or ApprovalDenied
	Actor       string
	Note        string
	Reason      string // the history's reason, for a denial
}

// ApprovalDriver is the part of a Driver that keeps approvals. Insert
// writes the approval a reservation asks for (ReserveParams.Approval) in
// the same atomic step as the operation.
type ApprovalDriver interface {
	GetApproval(ctx context.Context, id string) (*ledger.Approval, error)
	// Decide makes d, guarded by the approval's tenant, fingerprint,
	// pending status, time and requester (who may not decide), or returns
	// ErrGuard.
	Decide(ctx context.Context, d Decision) (*ledger.Approval, error)
	// Reopen gives the operation the new approval p.Request, guarded by its
	// being prepared under the lapsed approval p.Previous, or returns
	// ErrGuard. The lapsed one is marked expired unless it was used.
	Reopen(ctx context.Context, p ledger.ReopenParams) (*ledger.Operation, error)
	// ExpireApproval expires one approval past its time by the store's
	// clock, and reports whether it did.
	ExpireApproval(ctx context.Context, id string) (bool, error)
}

// Decide implements ledger.Store's Approve and Deny on d. The approval is
// read first, to refuse a decider without the right (role, tenant,
// requester) with a clear error; the guarded step then checks status,
// time and fingerprint again, so that of two concurrent decisions exactly
// one wins.
func Decide(ctx context.Context, d Driver, p ledger.DecisionParams, to ledger.ApprovalStatus) (*ledger.Approval, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	verb := map[ledger.ApprovalStatus]string{ledger.ApprovalApproved: "approve", ledger.ApprovalDenied: "deny"}[to]
	a, err := d.GetApproval(ctx, p.ApprovalID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	if err := p.Check(a, time.Now()); err != nil {
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	reason := "approval denied by " + p.Actor // the denial's history line and audit event
	if p.Note != "" {
		reason += ": " + p.Note // the approver's word is part of the decision
	}
	decided, err := d.Decide(ctx, Decision{ID: p.ApprovalID, Tenant: p.Tenant, Fingerprint: p.Fingerprint, Status: to,
		Actor: p.Actor, Note: p.Note, Reason: reason})
	if !errors.Is(err, ErrGuard) {
		if err != nil {
			return nil, fmt.Errorf("%s: %w", verb, err)
		}
		return decided, nil
	}
	// Someone decided first, or it expired by the store's clock.
	if a, err = d.GetApproval(ctx, p.ApprovalID); err != nil {
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	if err := p.Check(a, time.Now()); err != nil {
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	return nil, fmt.Errorf("%s: approval %s expired by the store's clock: %w", verb, a.ID, ledger.ErrApprovalClosed)
}

// Reopen implements ledger.Store.ReopenApproval on d. A reopening that
// finds its own approval already in place (a repeat after a lost reply)
// succeeds; one that lost to another retry, or finds the approval still
// good, returns the operation as it stands with ErrIllegalTransition.
func Reopen(ctx context.Context, d Driver, p ledger.ReopenParams) (*ledger.Operation, error) {
	if p.Request.ID == "" {
		p.Request.ID = ledger.NewApprovalID()
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	// The new approval asks for the same thing on the same requester's
	// behalf, whoever retried: else the requester could approve its own
	// operation once another principal's retry reopened it, or a retry
	// send headers the request that asked first did not carry.
	prev, err := d.GetApproval(ctx, p.Previous)
	if err != nil {
		return nil, fmt.Errorf("reopen approval: %w", err)
	}
	p.Request.RequestedBy, p.Request.Summary, p.Request.Headers = prev.RequestedBy, prev.Summary, prev.Headers
	op, err := d.Reopen(ctx, p)
	if !errors.Is(err, ErrGuard) {
		if err != nil {
			return nil, fmt.Errorf("reopen approval: %w", err)
		}
		return op, nil
	}
	current, err := d.Get(ctx, p.OpID)
	if err != nil {
		return nil, fmt.Errorf("reopen approval: %w", err)
	}
	if current.Approval != nil && current.Approval.ID == p.Request.ID {
		return current, nil
	}
	return current, fmt.Errorf("reopen approval of %s: %w: its approval is %s, or it is %s", p.OpID,
		ledger.ErrIllegalTransition, approvalOf(current), current.State)
}

func approvalOf(op *ledger.Operation) string {
	if op.Approval == nil {
		return "none"
	}
	return op.Approval.ID + " " + string(op.Approval.Status)
}

// GetApproval implements ledger.Store.GetApproval on d.
func GetApproval(ctx context.Context, d Driver, id string) (*ledger.Approval, error) {
	a, err := d.GetApproval(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("get approval: %w", err)
	}
	return a, nil
}
