package keyed

import (
	"errors"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// cached answers from the replay cache exactly as from the store.
func (x *Executor) cached(e *exec, op *ledger.Operation) Result {
	if !e.sameCommand(op) {
		x.noteRefusal(e, ledger.ErrFingerprintMismatch, op)
		return x.refused(contract.ProblemFor(ledger.ErrFingerprintMismatch), op)
	}
	e.retry, e.replayedState = RetryReplay, op.State
	x.note(e, audit.Replayed, op, "")
	return x.replay(op)
}

// replay answers a final operation: its stored answer, or the denial
// that ended it.
func (x *Executor) replay(op *ledger.Operation) Result {
	if op.Response == nil && op.State == ledger.Failed && op.LastError == contract.CodeApprovalDenied {
		return x.refused(contract.NewProblem(contract.CodeApprovalDenied, "the approval for this operation was denied"), op)
	}
	return Result{Op: op, State: op.State, Replayed: true, Answer: op.Response}
}

// duplicate answers a new key whose business key belongs to another
// operation: that operation's answer, marked as such, and nothing run.
func (x *Executor) duplicate(e *exec, op *ledger.Operation) Result {
	if op.State == ledger.Executing && e.Wait > 0 {
		op = x.wait(e, op)
	}
	var res Result
	switch op.State {
	case ledger.Succeeded, ledger.Failed:
		res = x.replay(op)
	case ledger.Unknown:
		res = x.refused(contract.NewProblem(contract.CodeOutcomeUnknown, "an operation with the same business "+
			"identity has an unknown outcome; check its status resource"), op)
	case ledger.Prepared:
		if op.Approval == nil {
			// Released: nothing was sent, so this redelivery may run it.
			return x.acquire(e, op)
		}
		fallthrough
	default:
		res = x.refused(inProgress("an operation with the same business identity is in progress"), op)
	}
	res.Duplicate = true
	return res
}

// existing answers a command whose key already has an operation.
func (x *Executor) existing(e *exec, op *ledger.Operation) Result {
	if e.retry == "" {
		e.retry = retryOf(op)
	}
	if op.State == ledger.Executing && e.Wait > 0 {
		op = x.lapsed(e, x.wait(e, op))
	}
	switch op.State {
	case ledger.Succeeded, ledger.Failed:
		x.cache.put(op)
		x.note(e, audit.Replayed, op, "")
		return x.replay(op)
	case ledger.Executing:
		x.note(e, audit.Received, op, "in progress: answered in_progress, nothing run")
		return x.refused(inProgress("this operation is being executed; retry with the same key, or wait for it"), op)
	case ledger.Unknown:
		if e.Policy.Resend {
			return x.acquire(e, op)
		}
		x.note(e, audit.Received, op, "outcome unknown: answered outcome_unknown, nothing run")
		return x.refused(contract.NewProblem(contract.CodeOutcomeUnknown, unknownDetail(op)), op)
	}
	if op.Approval != nil {
		return x.approved(e, op)
	}
	return x.acquire(e, op)
}

// unknownDetail says what an unknown operation's retry is told, in the
// words of its kind: an action's effect is its caller's own.
func unknownDetail(op *ledger.Operation) string {
	if op.Kind == ledger.KindAction {
		return "the effect may have been performed (its owner said it does not know, or its lease lapsed before " +
			"it said how it ended): it is not run again; check the status resource, or ask an operator to resolve it"
	}
	return "the request was sent and its outcome is unknown: it is not re-sent; check the status resource, or ask " +
		"an operator to resolve it"
}

func inProgress(detail string) *contract.Problem {
	p := contract.NewProblem(contract.CodeInProgress, detail)
	p.RetryAfter = 1
	return p
}

// lapsed answers for an operation a wait found still executing: one whose
// lease has lapsed (its owner is gone) is expired by reserving its key
// again, as any later command would, so that the waiter hears unknown,
// not in_progress for an owner that will never answer.
func (x *Executor) lapsed(e *exec, op *ledger.Operation) *ledger.Operation {
	if op.State != ledger.Executing || time.Now().Before(op.LeaseUntil.Add(leaseGrace)) {
		return op
	}
	ctx, cancel := detached(e.ctx, recordTimeout)
	defer cancel()
	res, err := x.reserve(ctx, e, nil)
	if err != nil || res.Op == nil || res.Owned() || res.Op.ID != op.ID {
		return op // answered as it stands: in progress
	}
	return res.Op
}

// retried answers, under a policy that asks for approvals, a command
// whose key already has an operation, from one read: the retries of an
// operation waiting for a human write nothing, and need no policy
// evaluated. It reports whether it answered; an executing operation is
// left to the reservation, which expires a lapsed lease.
func (x *Executor) retried(e *exec) (Result, bool) {
	if e.Policy.Approval == nil {
		return Result{}, false
	}
	op, err := x.opts.Store.GetByKey(e.ctx, e.opKey())
	switch {
	case errors.Is(err, ledger.ErrNotFound), err == nil && op.State == ledger.Executing:
		return Result{}, false
	case err != nil:
		return x.refused(contract.ProblemFor(err), nil), true
	case !e.sameCommand(op):
		x.noteRefusal(e, ledger.ErrFingerprintMismatch, op)
		return x.refused(contract.ProblemFor(ledger.ErrFingerprintMismatch), op), true
	}
	return x.existing(e, op), true
}

// acquire runs a prepared operation (one released after a definite
// non-delivery, or approved), or runs an unknown one again where the
// policy allows it.
func (x *Executor) acquire(e *exec, op *ledger.Operation) Result {
	resend := op.State == ledger.Unknown
	reason := "retry after release"
	switch {
	case resend:
		reason = "re-sent with the same key: the upstream honours it"
	case op.Approval != nil && op.Approval.Status == ledger.ApprovalApproved:
		reason = "approved: executing"
	}
	ctx, cancel := detached(e.ctx, recordTimeout)
	r, err := x.opts.Store.Acquire(ctx, ledger.AcquireParams{ID: op.ID, Lease: e.Policy.lease(),
		Actor: x.opts.Actor, Reason: reason, Resend: resend, RunID: e.Run, TraceID: e.Trace})
	cancel()
	switch {
	case errors.Is(err, ledger.ErrApprovalRequired) && r.Op != nil:
		// Lapsed by the store's clock since it was read: a new approval,
		// unless this command tried one already.
		if e.reopened {
			return x.accepted(e, r.Op, contract.CodeApprovalRequired)
		}
		return x.reopen(e, r.Op)
	case errors.Is(err, ledger.ErrIllegalTransition):
		return x.takenFirst(e, op)
	case err != nil:
		return x.refused(contract.ProblemFor(err), op)
	}
	return x.run(e, r)
}

// takenFirst answers a command whose acquisition another retry beat:
// as for any existing operation, once it is no longer between hands.
func (x *Executor) takenFirst(e *exec, op *ledger.Operation) Result {
	latest, err := x.opts.Store.Get(e.ctx, op.ID)
	switch {
	case err != nil:
		return x.refused(contract.ProblemFor(err), op)
	case latest.State == ledger.Prepared || latest.State == ledger.Unknown:
		return x.refused(inProgress("another retry is taking this operation; retry with the same key"), latest)
	}
	return x.existing(e, latest)
}
