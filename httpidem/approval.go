package httpidem

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/fingerprint"
	"github.com/idemgate/idemgate/ledger"
)

// approvalFor evaluates the route's policy on a request that would create
// an operation: nil when it needs no approval. A policy that cannot be
// evaluated on this request refuses it (422), with nothing reserved.
func (m *Middleware) approvalFor(r *http.Request, req *request) (*ledger.ApprovalRequest, *contract.Problem) {
	pol := req.route.Approval
	if pol == nil {
		return nil, nil
	}
	in := m.policyInput(r, req)
	required, err := pol.Required(in)
	if err != nil {
		return nil, contract.NewProblem(contract.CodeInvalidCommand, err.Error()+"; nothing was reserved")
	}
	if !required {
		return nil, nil
	}
	return m.approvalRequest(req, in)
}

// approvalRequest is what the ledger is asked to open for req.
func (m *Middleware) approvalRequest(req *request, in approval.Input) (*ledger.ApprovalRequest, *contract.Problem) {
	pol := req.route.Approval
	summary, err := pol.Summary(in)
	if err != nil {
		return nil, contract.NewProblem(contract.CodeInvalidCommand, err.Error()+"; nothing was reserved")
	}
	command, err := fingerprint.Canonical(req.command)
	if err != nil {
		return nil, contract.NewProblem(contract.CodeInvalidCommand, err.Error())
	}
	target := in.Method + " " + in.Path
	if req.route.named() {
		target = req.target
	}
	if req.rawQuery != "" {
		target += "?" + req.rawQuery
	}
	return &ledger.ApprovalRequest{ID: ledger.NewApprovalID(), Target: target, Summary: summary, Command: command,
		Headers: approvalHeaders(req.header, req.route), Reversible: pol.Reversible(), RequestedBy: in.Principal.Name, Approvers: pol.Approvers(),
		TTL: pol.TTL(), ValidFor: pol.ValidFor()}, nil
}

func (m *Middleware) policyInput(r *http.Request, req *request) approval.Input {
	return approval.Input{Method: req.route.Method, Path: r.URL.EscapedPath(), Params: req.params, Query: req.query,
		Body: req.command, Headers: req.headers, Principal: req.principal}
}

// approved handles a retry of an operation bound to an approval: it runs
// once approved, opens a new approval once the old one lapsed, and
// otherwise answers 202 (after waiting for the decision, with Prefer: wait).
func (m *Middleware) approved(w http.ResponseWriter, r *http.Request, req *request, op *ledger.Operation, next http.Handler) {
	if wait, ok := preferWait(r, m.opts.MaxWait); ok && op.Approval.Status == ledger.ApprovalPending {
		op = m.waitDecision(r.Context(), op, wait)
		if op.State != ledger.Prepared {
			m.existing(w, r, req, op, next)
			return
		}
	}
	now := time.Now()
	switch {
	case op.Approval.Lapsed(now) && req.reopened:
		// This request tried already; the store's clock says otherwise.
		m.accepted(w, r, op, contract.CodeApprovalRequired)
	case op.Approval.Lapsed(now):
		m.reopen(w, r, req, op, next)
	case op.Approval.Usable(now):
		m.acquire(w, r, req, op, next)
	default:
		m.accepted(w, r, op, contract.CodeApprovalRequired)
	}
}

// reopen opens a new approval for an operation whose approval lapsed:
// a stale consent is never used, and the operation is not lost.
func (m *Middleware) reopen(w http.ResponseWriter, r *http.Request, req *request, op *ledger.Operation, next http.Handler) {
	req.reopened = true // at most once per request, whatever the clocks say
	if req.route.Approval == nil {
		m.problem(w, contract.NewProblem(contract.CodeApprovalClosed, "this operation's approval lapsed and its route no longer "+
			"asks for approvals, so none can be opened; ask an operator"), op)
		return
	}
	apr, p := m.approvalRequest(req, m.policyInput(r, req))
	if p != nil {
		m.problem(w, p, op)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), recordTimeout)
	reopened, err := m.opts.Store.ReopenApproval(ctx, ledger.ReopenParams{OpID: op.ID, Previous: op.Approval.ID,
		Request: *apr, Actor: m.opts.Actor})
	cancel()
	switch {
	case err == nil:
		m.accepted(w, r, reopened, contract.CodeApprovalExpired)
	case errors.Is(err, ledger.ErrIllegalTransition) && reopened != nil:
		// Another retry opened it first, or the store's clock says the
		// approval is still good: answer as it now stands, once.
		m.existing(w, r, req, reopened, next)
	case errors.Is(err, ledger.ErrConcurrencyLocked):
		p := contract.NewProblem(contract.CodeConcurrencyLocked, "another live operation holds this route's concurrency group; "+
			"this operation's new approval is opened once it has ended: retry with the same key")
		p.RetryAfter = 1
		m.problem(w, p, op)
	default:
		m.problem(w, contract.ProblemFor(err), op)
	}
}

// accepted answers 202 for an operation waiting for its approval, with
// the approval's summary, so that the caller can tell a human what waits.
func (m *Middleware) accepted(w http.ResponseWriter, r *http.Request, op *ledger.Operation, code string) {
	ref := op.Approval
	summary, ok := m.summaries.get(ref.ID)
	if !ok {
		a, err := m.opts.Store.GetApproval(r.Context(), ref.ID)
		if err != nil {
			m.problem(w, contract.ProblemFor(err), op)
			return
		}
		summary = a.Summary
		m.summaries.put(a.ID, summary)
	}
	detail := "a human must approve this operation before it runs; nothing was sent. Retry with the same key " +
		"(or send Prefer: wait=N) to run it once approved"
	if code == contract.CodeApprovalExpired {
		detail = "the earlier approval lapsed (it expired undecided, or was not used in time); a new one was " +
			"opened for the same operation. " + detail
	}
	contract.NoteCode(w, code)
	body := contract.Accepted{Code: code, Detail: detail, OperationID: op.ID, State: op.State,
		Approval: contract.AcceptedApproval{ID: ref.ID, Status: ref.Status, ExpiresAt: ref.ExpiresAt.UTC(), Summary: summary,
			Fingerprint: op.Fingerprint}} // the approval's: it binds the operation's fingerprint
	h := w.Header()
	if m.opts.StatusBase != "" {
		body.StatusURL = m.opts.StatusBase + "/operations/" + op.ID
		body.Approval.URL = m.opts.StatusBase + "/approvals/" + ref.ID
		h.Set("Location", body.StatusURL)
	}
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set(contract.HeaderOperation, op.ID)
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(body)
}

// waitDecision waits, bounded by d and the request, until the operation's
// approval is no longer pending: decided in this process (a signal), or in
// another one (found by polling).
func (m *Middleware) waitDecision(ctx context.Context, op *ledger.Operation, d time.Duration) *ledger.Operation {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	poll := 50 * time.Millisecond
	for op.State == ledger.Prepared && op.Approval != nil && op.Approval.Status == ledger.ApprovalPending &&
		time.Now().Before(op.Approval.ExpiresAt) {
		done := m.waiters.wait(op.ID)
		select {
		case <-ctx.Done():
			m.waiters.forget(op.ID, done)
			return op
		case <-done:
		case <-time.After(poll):
			poll = min(poll*2, time.Second)
		}
		m.waiters.forget(op.ID, done)
		latest, err := m.opts.Store.Get(context.WithoutCancel(ctx), op.ID)
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
