package httpidem

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// cached answers from the replay cache exactly as from the store.
func (m *Middleware) cached(ctx context.Context, w http.ResponseWriter, req *request, op *ledger.Operation) {
	if op.Fingerprint != req.fingerprint {
		m.noteRefusal(req, ledger.ErrFingerprintMismatch, op)
		m.problem(w, contract.ProblemFor(ledger.ErrFingerprintMismatch), op)
		return
	}
	req.retry, req.replayed = RetryReplay, op.State
	m.note(req, audit.Replayed, op, "")
	m.replay(ctx, w, op)
}

// duplicate answers a new key whose business key belongs to another
// operation: that operation's answer, marked as such, and nothing forwarded.
func (m *Middleware) duplicate(w http.ResponseWriter, r *http.Request, req *request, op *ledger.Operation, next http.Handler) {
	if wait, ok := preferWait(r, m.opts.MaxWait); ok && op.State == ledger.Executing {
		op = m.wait(r.Context(), op, wait)
	}
	w.Header().Set(contract.HeaderDuplicateOf, op.ID)
	switch op.State {
	case ledger.Succeeded, ledger.Failed:
		m.replay(r.Context(), w, op)
	case ledger.Unknown:
		m.problem(w, contract.NewProblem(contract.CodeOutcomeUnknown, "an operation with the same business identity has an "+
			"unknown outcome; check its status resource"), op)
	case ledger.Prepared:
		if op.Approval == nil {
			// Released: nothing was sent, so this redelivery may run it.
			w.Header().Del(contract.HeaderDuplicateOf)
			m.acquire(w, r, req, op, next)
			return
		}
		fallthrough
	default:
		p := contract.NewProblem(contract.CodeInProgress, "an operation with the same business identity is in progress")
		p.RetryAfter = 1
		m.problem(w, p, op)
	}
}

// existing answers a request whose key already has an operation.
func (m *Middleware) existing(w http.ResponseWriter, r *http.Request, req *request, op *ledger.Operation, next http.Handler) {
	if req.retry == "" {
		req.retry = retryOf(op)
	}
	if wait, ok := preferWait(r, m.opts.MaxWait); ok && op.State == ledger.Executing {
		op = m.lapsed(r.Context(), req, m.wait(r.Context(), op, wait))
	}
	switch op.State {
	case ledger.Succeeded, ledger.Failed:
		m.cache.put(op)
		m.note(req, audit.Replayed, op, "")
		m.replay(r.Context(), w, op)
	case ledger.Executing:
		m.note(req, audit.Received, op, "in progress: answered 409, nothing sent")
		p := contract.NewProblem(contract.CodeInProgress, "this operation is being executed; retry with the same key, or send Prefer: wait=N")
		p.RetryAfter = 1
		m.problem(w, p, op)
	case ledger.Unknown:
		if req.route.Resend {
			m.acquire(w, r, req, op, next)
			return
		}
		m.note(req, audit.Received, op, "outcome unknown: answered 409, nothing sent")
		m.problem(w, contract.NewProblem(contract.CodeOutcomeUnknown, "the request was sent and its outcome is unknown: it is not "+
			"re-sent; check the status resource, or ask an operator to resolve it"), op)
	case ledger.Prepared:
		if op.Approval != nil {
			m.approved(w, r, req, op, next)
			return
		}
		m.acquire(w, r, req, op, next)
	}
}

// lapsed answers for an operation a wait found still executing: one whose
// lease has lapsed (its owner is gone) is expired by reserving its key
// again, as any later request would, so that the waiter hears unknown,
// not in_progress for an owner that will never answer.
func (m *Middleware) lapsed(ctx context.Context, req *request, op *ledger.Operation) *ledger.Operation {
	if op.State != ledger.Executing || time.Now().Before(op.LeaseUntil.Add(leaseGrace)) {
		return op
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	res, err := m.reserve(ctx, req, nil)
	if err != nil || res.Op == nil || res.Owned() || res.Op.ID != op.ID {
		return op // answered as it stands: in progress
	}
	return res.Op
}

// retried answers, on a route that asks for approvals, a request whose key
// already has an operation, from one read: the retries of an operation
// waiting for a human write nothing, and need no policy evaluated. It
// reports whether it answered; an executing operation is left to the
// reservation, which expires a lapsed lease.
func (m *Middleware) retried(w http.ResponseWriter, r *http.Request, req *request, next http.Handler) bool {
	if req.route.Approval == nil {
		return false
	}
	op, err := m.opts.Store.GetByKey(r.Context(), req.opKey())
	switch {
	case errors.Is(err, ledger.ErrNotFound), err == nil && op.State == ledger.Executing:
		return false
	case err != nil:
		m.problem(w, contract.ProblemFor(err), nil)
	case op.Fingerprint != req.fingerprint:
		m.noteRefusal(req, ledger.ErrFingerprintMismatch, op)
		m.problem(w, contract.ProblemFor(ledger.ErrFingerprintMismatch), op)
	default:
		m.existing(w, r, req, op, next)
	}
	return true
}

// acquire executes a prepared operation (one released after a definite
// non-delivery or a rate limit is safe to run again), or re-sends an unknown
// one where the route allows it.
func (m *Middleware) acquire(w http.ResponseWriter, r *http.Request, req *request, op *ledger.Operation, next http.Handler) {
	resend := op.State == ledger.Unknown
	reason := "retry after release"
	switch {
	case resend:
		reason = "re-sent with the same key: the upstream honours it"
	case op.Approval != nil && op.Approval.Status == ledger.ApprovalApproved:
		reason = "approved: executing"
	}
	if op.Approval != nil && req.route.Action == "" {
		a, err := m.opts.Store.GetApproval(r.Context(), op.Approval.ID)
		if err != nil {
			m.problem(w, contract.ProblemFor(err), op)
			return
		}
		r = asApproved(r, req.route, a.Headers)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), recordTimeout)
	res, err := m.opts.Store.Acquire(ctx, ledger.AcquireParams{ID: op.ID, Lease: req.route.Lease,
		Actor: m.opts.Actor, Reason: reason, Resend: resend, RunID: req.run, TraceID: req.trace})
	cancel()
	if errors.Is(err, ledger.ErrApprovalRequired) && res.Op != nil {
		// Lapsed by the store's clock since it was read: a new approval,
		// unless this request tried one already.
		if req.reopened {
			m.accepted(w, r, res.Op, contract.CodeApprovalRequired)
			return
		}
		m.reopen(w, r, req, res.Op, next)
		return
	}
	if errors.Is(err, ledger.ErrIllegalTransition) {
		// Another retry took it first: answer as for any existing one.
		latest, gerr := m.opts.Store.Get(r.Context(), op.ID)
		switch {
		case gerr != nil:
			m.problem(w, contract.ProblemFor(gerr), op)
		case latest.State == ledger.Prepared || latest.State == ledger.Unknown:
			p := contract.NewProblem(contract.CodeInProgress, "another retry is taking this operation; retry with the same key")
			p.RetryAfter = 1
			m.problem(w, p, latest)
		default:
			m.existing(w, r, req, latest, next)
		}
		return
	}
	if err != nil {
		m.problem(w, contract.ProblemFor(err), op)
		return
	}
	m.run(w, r, req, res, next)
}
