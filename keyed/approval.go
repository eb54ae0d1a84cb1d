package keyed

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/fingerprint"
	"github.com/idemgate/idemgate/ledger"
)

// approvalFor evaluates the policy on a command that would create an
// operation: nil when it needs no approval. A policy that cannot be
// evaluated on this command refuses it (invalid_command), with nothing
// reserved.
func (x *Executor) approvalFor(e *exec) (*ledger.ApprovalRequest, *contract.Problem) {
	pol := e.Policy.Approval
	if pol == nil {
		return nil, nil
	}
	required, err := pol.Required(e.Approval.Input)
	if err != nil {
		return nil, contract.NewProblem(contract.CodeInvalidCommand, err.Error()+"; nothing was reserved")
	}
	if !required {
		return nil, nil
	}
	return x.approvalRequest(e)
}

// approvalRequest is what the ledger is asked to open for e.
func (x *Executor) approvalRequest(e *exec) (*ledger.ApprovalRequest, *contract.Problem) {
	pol, in := e.Policy.Approval, e.Approval
	summary, err := pol.Summary(in.Input)
	if err != nil {
		return nil, contract.NewProblem(contract.CodeInvalidCommand, err.Error()+"; nothing was reserved")
	}
	command, err := fingerprint.Canonical(in.Command)
	if err != nil {
		return nil, contract.NewProblem(contract.CodeInvalidCommand, err.Error())
	}
	headers := in.Headers
	if headers == nil {
		headers = map[string][]string{} // kept, and said so (ledger.Approval.Headers)
	}
	return &ledger.ApprovalRequest{ID: ledger.NewApprovalID(), Target: in.Target, Summary: summary, Command: command,
		Headers: headers, Reversible: pol.Reversible(), RequestedBy: in.Input.Principal.Name, Approvers: pol.Approvers(),
		TTL: pol.TTL(), ValidFor: pol.ValidFor()}, nil
}

// approved handles a retry of an operation bound to an approval: it runs
// once approved, opens a new approval once the old one lapsed, and
// otherwise is accepted, waiting (after waiting for the decision, if the
// command waits).
func (x *Executor) approved(e *exec, op *ledger.Operation) Result {
	if e.Wait > 0 && op.Approval.Status == ledger.ApprovalPending {
		op = x.waitDecision(e, op)
		if op.State != ledger.Prepared {
			return x.existing(e, op)
		}
	}
	now := time.Now()
	switch {
	case op.Approval.Lapsed(now) && e.reopened:
		// This command tried already; the store's clock says otherwise.
		return x.accepted(e, op, contract.CodeApprovalRequired)
	case op.Approval.Lapsed(now):
		return x.reopen(e, op)
	case op.Approval.Usable(now):
		return x.acquire(e, op)
	}
	return x.accepted(e, op, contract.CodeApprovalRequired)
}

// reopen opens a new approval for an operation whose approval lapsed:
// a stale consent is never used, and the operation is not lost.
func (x *Executor) reopen(e *exec, op *ledger.Operation) Result {
	e.reopened = true // at most once per command, whatever the clocks say
	if e.Policy.Approval == nil {
		return x.refused(contract.NewProblem(contract.CodeApprovalClosed, "this operation's approval lapsed and its "+
			"route no longer asks for approvals, so none can be opened; ask an operator"), op)
	}
	apr, p := x.approvalRequest(e)
	if p != nil {
		return x.refused(p, op)
	}
	ctx, cancel := detached(e.ctx, recordTimeout)
	reopened, err := x.opts.Store.ReopenApproval(ctx, ledger.ReopenParams{OpID: op.ID, Previous: op.Approval.ID,
		Request: *apr, Actor: x.opts.Actor})
	cancel()
	switch {
	case err == nil:
		return x.accepted(e, reopened, contract.CodeApprovalExpired)
	case errors.Is(err, ledger.ErrIllegalTransition) && reopened != nil:
		// Another retry opened it first, or the store's clock says the
		// approval is still good: answer as it now stands, once.
		return x.existing(e, reopened)
	case errors.Is(err, ledger.ErrConcurrencyLocked):
		p := contract.NewProblem(contract.CodeConcurrencyLocked, "another live operation holds this route's "+
			"concurrency group; this operation's new approval is opened once it has ended: retry with the same key")
		p.RetryAfter = 1
		return x.refused(p, op)
	}
	return x.refused(contract.ProblemFor(err), op)
}

// accepted answers for an operation waiting for its approval, with the
// approval's summary, so that the caller can tell a human what waits.
func (x *Executor) accepted(e *exec, op *ledger.Operation, code string) Result {
	ref := op.Approval
	summary, ok := x.summaries.get(ref.ID)
	if !ok {
		a, err := x.opts.Store.GetApproval(e.ctx, ref.ID)
		if err != nil {
			return x.refused(contract.ProblemFor(err), op)
		}
		summary = a.Summary
		x.summaries.put(a.ID, summary)
	}
	detail := "a human must approve this operation before it runs; nothing was sent. Retry with the same key " +
		"(or wait for the decision) to run it once approved"
	if code == contract.CodeApprovalExpired {
		detail = "the earlier approval lapsed (it expired undecided, or was not used in time); a new one was " +
			"opened for the same operation. " + detail
	}
	acc := &contract.Accepted{Code: code, Detail: detail, OperationID: op.ID, State: op.State,
		Approval: contract.AcceptedApproval{ID: ref.ID, Status: ref.Status, ExpiresAt: ref.ExpiresAt.UTC(), Summary: summary,
			Fingerprint: op.Fingerprint}} // the approval's: it binds the operation's fingerprint
	if x.opts.StatusBase != "" {
		acc.StatusURL = x.opts.StatusBase + "/operations/" + op.ID
		acc.Approval.URL = x.opts.StatusBase + "/approvals/" + ref.ID
	}
	return Result{Op: op, State: op.State, Accepted: acc, Created: e.created}
}

// waitDecision waits, bounded by e's wait and its context, until the
// operation's approval is no longer pending: decided in this process (a
// signal), or in another one (found by polling).
func (x *Executor) waitDecision(e *exec, op *ledger.Operation) *ledger.Operation {
	ctx, cancel := context.WithTimeout(e.ctx, min(e.Wait, x.opts.MaxWait))
	defer cancel()
	poll := 50 * time.Millisecond
	for op.State == ledger.Prepared && op.Approval != nil && op.Approval.Status == ledger.ApprovalPending &&
		time.Now().Before(op.Approval.ExpiresAt) {
		done := x.waiters.wait(op.ID)
		select {
		case <-ctx.Done():
			x.waiters.forget(op.ID, done)
			return op
		case <-done:
		case <-time.After(poll):
			poll = min(poll*2, time.Second)
		}
		x.waiters.forget(op.ID, done)
		latest, err := x.opts.Store.Get(context.WithoutCancel(ctx), op.ID)
		if err != nil {
			return op
		}
		op = latest
	}
	return op
}

// summaries keeps the summaries of recent approvals, which never change,
// so that a retry of a pending operation costs one read of the store.
type summaries struct {
	mu sync.Mutex
	m  map[string]string
}

// maxSummaries bounds the cache; past it, it starts again empty.
const maxSummaries = 4096

func (s *summaries) get(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[id]
	return v, ok
}

func (s *summaries) put(id, summary string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= maxSummaries {
		s.m = make(map[string]string)
	}
	s.m[id] = summary
}
