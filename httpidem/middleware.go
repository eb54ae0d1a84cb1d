package httpidem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Options configure the middleware. Store, Routes and Tenant are required.
type Options struct {
	Store  ledger.Store
	Routes []Route
	// Tenant names the caller's tenant; an error answers 401. Keys are
	// scoped by tenant: the same key in two tenants is two operations.
	Tenant func(r *http.Request) (string, error)
	// Principal names the caller whole (name, tenant, roles): required
	// with routes that ask for approvals, whose policy reads it and whose
	// approvals record who requested them. Approvals decided through
	// ApprovalRoutes are decided by it too.
	Principal func(r *http.Request) (approval.Principal, error)
	// Actor is recorded in each operation's history (default "httpidem").
	Actor string
	// Defaults for the routes: Lease 30s, Retention 24h, MaxBody 1 MiB.
	Lease     time.Duration
	Retention time.Duration
	MaxBody   int64
	// MaxResponse bounds a stored response (default 1 MiB). A larger one
	// is streamed to the client and its operation left unknown: an answer
	// that cannot be replayed must not look replayable.
	MaxResponse int64
	// MaxWait caps Prefer: wait (default 60s).
	MaxWait time.Duration
	// RecordDeadline bounds how long an outcome is retried against a store
	// that is briefly unavailable, the answer held meanwhile (default 30s).
	// Past it the client gets the answer unrecorded, and the operation
	// becomes unknown when its lease lapses.
	RecordDeadline time.Duration
	// StatusBase, if set, is the control API prefix whose status resource
	// problems link to (e.g. "/_idem/v1").
	StatusBase string
	// Admit, if set, is asked before a request may reserve a new
	// operation for tenant; a problem (429 rate_limited, say) refuses it
	// with nothing reserved. A retry of a key that exists is never refused
	// by it: it adds nothing. An admitted request calls settle once, at its
	// end, with whether it left a live operation behind (one it created,
	// not yet final), so that budgets of live operations stay true.
	Admit func(ctx context.Context, tenant string) (settle func(live bool), p *contract.Problem)
	// Recorded, if set, hears each final operation this middleware
	// recorded, with its stored response (for budgets of stored bytes).
	Recorded func(op *ledger.Operation)
	// ReplayCache bounds, in bytes, the final operations kept in memory to
	// answer replays without the store (default 32 MiB; negative: none).
	// It holds only what the store has durably recorded, so it is off for a
	// store that says it acknowledges before the disk (see ledger.Relaxed).
	ReplayCache int64
	Logger      *slog.Logger
	// Audit, if set, hears the audit events that record no transition
	// (replays, conflicts, duplicates, locks, retries answered as they
	// stand, answers that could not be recorded): docs/design.md, "Audit log".
	Audit Recorder
	// Observer, if set, hears how each keyed request ended (the metrics).
	Observer Observer
}

// Middleware puts the idempotency contract in front of handlers.
type Middleware struct {
	opts      Options
	routes    *router
	waiters   *waiters
	cache     *replayCache
	summaries summaries
}

// New checks opts and builds the middleware.
func New(opts Options) (*Middleware, error) {
	if opts.Store == nil || opts.Tenant == nil {
		return nil, errors.New("httpidem: Store and Tenant are required")
	}
	setDefaults(&opts)
	var routes []*route
	for _, r := range opts.Routes {
		c, err := compileRoute(r, &opts)
		if err != nil {
			return nil, fmt.Errorf("httpidem: %w", err)
		}
		if c.Approval != nil && opts.Principal == nil {
			return nil, fmt.Errorf("httpidem: route %s %s asks for approvals: Options.Principal is required", c.Method, c.Pattern)
		}
		routes = append(routes, c)
	}
	rt, err := newRouter(routes)
	if err != nil {
		return nil, fmt.Errorf("httpidem: %w", err)
	}
	m := &Middleware{opts: opts, routes: rt, waiters: newWaiters()}
	if opts.ReplayCache > 0 && !ledger.IsRelaxed(opts.Store) {
		m.cache = newReplayCache(opts.ReplayCache)
	}
	return m, nil
}

func setDefaults(o *Options) {
	if o.Actor == "" {
		o.Actor = "httpidem"
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.Retention <= 0 {
		o.Retention = 24 * time.Hour
	}
	if o.MaxBody <= 0 {
		o.MaxBody = 1 << 20
	}
	if o.MaxResponse <= 0 {
		o.MaxResponse = contract.DefaultMaxResponse
	}
	if o.MaxWait <= 0 {
		o.MaxWait = time.Minute
	}
	if o.RecordDeadline <= 0 {
		o.RecordDeadline = 30 * time.Second
	}
	if o.ReplayCache == 0 {
		o.ReplayCache = 32 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Handler wraps next: configured write routes get the contract, every other
// request passes through untouched.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rt := m.routes.match(r)
		if rt == nil {
			next.ServeHTTP(w, r)
			return
		}
		m.serve(w, r, rt, next)
	})
}

// Wrap is Handler as a func(http.Handler) http.Handler, for middleware
// chains.
func (m *Middleware) Wrap() func(http.Handler) http.Handler { return m.Handler }

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, rt *route, next http.Handler) {
	req, p := m.readRequest(r, rt)
	if p != nil {
		p.Write(w)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(req.body))
	if req.key == "" {
		next.ServeHTTP(w, r)
		return
	}
	if m.opts.Observer != nil {
		ow := &observed{ResponseWriter: w}
		defer m.observe(req, ow, time.Now())
		w = ow
	}
	if op := m.cache.get(req.tenant, req.key); op != nil {
		m.cached(r.Context(), w, req, op)
		return
	}
	if m.retried(w, r, req, next) {
		return
	}
	apr, p := m.approvalFor(r, req)
	if p != nil {
		p.Write(w)
		return
	}
	settle, p := m.admit(r.Context(), req)
	if p != nil {
		p.Write(w)
		return
	}
	live := false
	defer func() { settle(live) }()
	// Detached: a client that leaves must not cut a reservation between its
	// commit and its reply, leaving an operation nobody owns.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), recordTimeout)
	res, err := m.reserve(ctx, req, apr)
	cancel()
	switch {
	case err != nil:
		m.reserveFailed(ctx, err, res.Op)
		if errors.Is(err, ledger.ErrFingerprintMismatch) && res.Op != nil {
			req.retry = retryOf(res.Op) // the key's reuse, with another request
		}
		m.noteRefusal(req, err, res.Op)
		m.problem(w, contract.ProblemFor(err), res.Op)
	case res.Owned():
		req.created = res.Created
		live = m.execute(w, r, req, *res.Lease, next)
	case res.Created: // prepared, waiting for its approval
		live = true
		if apr != nil {
			m.summaries.put(apr.ID, apr.Summary)
		}
		m.approved(w, r, req, res.Op, next)
	case res.Duplicate:
		m.note(req, audit.Duplicate, res.Op, "a new key for the business identity of "+res.Op.ID)
		m.duplicate(w, r, req, res.Op, next)
	default:
		m.existing(w, r, req, res.Op, next)
	}
}

// reserveRetry bounds how long a reservation whose reply was lost is
// repeated: long enough for a pool to replace a lost connection.
const reserveRetry = 500 * time.Millisecond

// reserve reserves req's operation. When the store's reply is lost (the
// reservation may have committed) it repeats the very same reservation,
// its id and token chosen here: one that committed is then recognised as
// this request's, instead of being left executing with nobody to run it,
// and turning unknown although nothing was sent. A store that cannot write
// is refused at once.
func (m *Middleware) reserve(ctx context.Context, req *request, apr *ledger.ApprovalRequest) (ledger.Reservation, error) {
	p := m.reserveParams(req)
	if apr != nil {
		p.Lease, p.Approval = 0, apr
	}
	p.ID, p.Token = ledger.NewID(), ledger.NewToken()
	res, err := m.opts.Store.Reserve(ctx, p)
	deadline := time.Now().Add(reserveRetry)
	for wait := 10 * time.Millisecond; errors.Is(err, ledger.ErrReplyLost) && time.Now().Before(deadline); wait *= 2 {
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(wait/2 + rand.N(wait/2+1)):
		}
		res, err = m.opts.Store.Reserve(ctx, p)
	}
	return res, err
}

// admit asks Admit whether req may create an operation; one refused whose
// key exists already goes on, since its reservation creates nothing.
func (m *Middleware) admit(ctx context.Context, req *request) (settle func(live bool), p *contract.Problem) {
	if m.opts.Admit == nil {
		return noSettle, nil
	}
	if settle, p = m.opts.Admit(ctx, req.tenant); p == nil {
		if settle == nil {
			settle = noSettle
		}
		return settle, nil
	}
	if _, err := m.opts.Store.GetByKey(ctx, req.tenant, req.key); err == nil {
		return noSettle, nil
	}
	return nil, p
}

func noSettle(bool) {}

// recorded tells Recorded of a final operation.
func (m *Middleware) recorded(op *ledger.Operation) {
	if m.opts.Recorded != nil && op != nil && op.State.Final() {
		m.opts.Recorded(op)
	}
}

// cached answers from the replay cache exactly as from the store.
func (m *Middleware) cached(ctx context.Context, w http.ResponseWriter, req *request, op *ledger.Operation) {
	req.retry = RetryReplay
	if op.Fingerprint != req.fingerprint {
		m.noteRefusal(req, ledger.ErrFingerprintMismatch, op)
		m.problem(w, contract.ProblemFor(ledger.ErrFingerprintMismatch), op)
		return
	}
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
		op = m.wait(r.Context(), op, wait)
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

// retried answers, on a route that asks for approvals, a request whose key
// already has an operation, from one read: the retries of an operation
// waiting for a human write nothing, and need no policy evaluated. It
// reports whether it answered; an executing operation is left to the
// reservation, which expires a lapsed lease.
func (m *Middleware) retried(w http.ResponseWriter, r *http.Request, req *request, next http.Handler) bool {
	if req.route.Approval == nil {
		return false
	}
	op, err := m.opts.Store.GetByKey(r.Context(), req.tenant, req.key)
	switch {
	case errors.Is(err, ledger.ErrNotFound), err == nil && op.State == ledger.Executing:
		return false
	case err != nil:
		m.problem(w, contract.ProblemFor(err), nil)
	case op.Fingerprint != req.fingerprint:
		req.retry = retryOf(op)
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
	m.execute(w, r, req, *res.Lease, next)
}

func (m *Middleware) problem(w http.ResponseWriter, p *contract.Problem, op *ledger.Operation) {
	p.For(op, m.opts.StatusBase).Write(w)
}

// reserveFailed logs a reservation the store could not make (its refusals,
// a mismatch or a lock, are answers, not failures), with the operation id
// when there is one.
func (m *Middleware) reserveFailed(ctx context.Context, err error, op *ledger.Operation) {
	for _, answer := range []error{ledger.ErrFingerprintMismatch, ledger.ErrConcurrencyLocked, ledger.ErrInvalid} {
		if errors.Is(err, answer) {
			return
		}
	}
	id := ""
	if op != nil {
		id = op.ID
	}
	m.log(ctx, "reserve", id, err)
}

// log reports a store failure that the response cannot carry.
func (m *Middleware) log(ctx context.Context, msg string, op string, err error) {
	m.failed(err)
	attrs := []slog.Attr{slog.String("error", err.Error())}
	if op != "" {
		attrs = append(attrs, slog.String("operation_id", op))
	}
	m.opts.Logger.LogAttrs(ctx, slog.LevelError, msg, attrs...)
}

// noteRefusal records a reservation's refusal that is an answer: a
// conflict (the key's operation has another fingerprint) or a lock.
func (m *Middleware) noteRefusal(req *request, err error, op *ledger.Operation) {
	switch {
	case op == nil:
	case errors.Is(err, ledger.ErrFingerprintMismatch):
		m.note(req, audit.Conflict, op, "the key's operation has fingerprint "+op.Fingerprint)
	case errors.Is(err, ledger.ErrConcurrencyLocked):
		m.note(req, audit.Locked, op, "concurrency group held by "+op.ID)
	}
}
