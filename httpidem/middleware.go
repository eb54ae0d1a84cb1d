// Package httpidem is the data plane of idemgate (docs/design.md, "The
// HTTP contract"): net/http middleware that gives a Go service's write
// handlers keyed reservation, fingerprint binding, replay, in-progress and
// unknown answers, approvals waited for, and problem responses. It is the
// keyed write path and nothing else: the control API is package control's,
// the background work package maintain's, the wire contract package
// contract's. The gateway is built on it.
//
// A keyed request's walk: serve.go (read the request, reserve its key),
// existing.go (a key that has an operation: replay, wait, refuse, or run
// it again), approval.go (a human's decision first), execute.go (run the
// handler under a lease, record its outcome, then answer), replay.go
// (a stored answer); report.go is what every step reports (problems, logs,
// audit events) and request.go, route.go the inputs.
package httpidem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Store is what the data plane needs of a store: the steps of a keyed
// write (reserve, acquire, heartbeat, complete, release, mark unknown,
// reopen an approval) and the reads that answer its retries. A
// ledger.Store is one, and so is one bound to a caller's transaction.
type Store interface {
	Reserve(ctx context.Context, p ledger.ReserveParams) (ledger.Reservation, error)
	Acquire(ctx context.Context, p ledger.AcquireParams) (ledger.Reservation, error)
	Heartbeat(ctx context.Context, l ledger.Lease, d time.Duration) (ledger.Lease, error)
	Complete(ctx context.Context, l ledger.Lease, o ledger.Outcome) (*ledger.Operation, error)
	Release(ctx context.Context, l ledger.Lease, n ledger.Note) (*ledger.Operation, error)
	MarkUnknown(ctx context.Context, l ledger.Lease, n ledger.Note) (*ledger.Operation, error)
	ReopenApproval(ctx context.Context, p ledger.ReopenParams) (*ledger.Operation, error)
	Get(ctx context.Context, id string) (*ledger.Operation, error)
	GetByKey(ctx context.Context, k ledger.OpKey) (*ledger.Operation, error)
	GetApproval(ctx context.Context, id string) (*ledger.Approval, error)
	History(ctx context.Context, id string) ([]ledger.Event, error)
}

var _ Store = ledger.Store(nil)

// Options configure the middleware. Store, Routes and Tenant are required.
type Options struct {
	Store  Store
	Routes []Route
	// Tenant names the caller's tenant; an error answers 401. Keys are
	// scoped by tenant: the same key in two tenants is two operations.
	Tenant func(r *http.Request) (string, error)
	// Principal names the caller whole (name, tenant, roles): required
	// with routes that ask for approvals, whose policy reads it and whose
	// approvals record who requested them. (Approvals are decided through
	// package control, whose Operator.Wake is this middleware's Changed.)
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
	// operation for tenant, with what it would hold; a problem (429
	// rate_limited, say) refuses it with nothing reserved. A retry of a
	// key that exists is never refused by it: it adds nothing. An admitted
	// request calls settle once, at its end, with whether it created the
	// operation and left it live (not yet final), so that budgets stay
	// true.
	Admit func(ctx context.Context, tenant string, a Admission) (settle func(created, live bool), p *contract.Problem)
	// MaxTarget bounds a keyed request's target, its method and path
	// (default 8 KiB), and MaxApprovalCommand the command an approval
	// holds and shows (default 64 KiB): each is kept on the operation and
	// copied into its audit events or its approval. Past them: 413, nothing
	// reserved.
	MaxTarget          int
	MaxApprovalCommand int
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
	m.announce(routes)
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
	if o.MaxTarget <= 0 {
		o.MaxTarget = 8 << 10
	}
	if o.MaxApprovalCommand <= 0 {
		o.MaxApprovalCommand = 64 << 10
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

// Changed tells the requests waiting on an operation (Prefer: wait) that
// it changed elsewhere: decided or resolved on the web page, say.
func (m *Middleware) Changed(opID string) { m.waiters.signal(opID) }
