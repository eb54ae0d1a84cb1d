// Package httpidem is the HTTP adapter of idemgate's keyed executor
// (docs/design.md, "The HTTP contract"): net/http middleware that maps a
// write route's request to a keyed.Command (its key, its fingerprint, its
// policy) and the executor's Result back to HTTP: the handler's answer,
// held until its outcome is recorded; a replay; a problem; a 202 waiting
// for a human; an action's lease. The keyed write path itself is package
// keyed's; the control API is package control's, the background work
// package maintain's, the wire contract package contract's. The gateway's
// routes, actions and webhook routes are built on it, and so is a Go
// service's own use.
//
// A keyed request's walk: request.go and route.go read and check it (a
// refusal changes nothing), serve.go hands it to the executor with the
// handler as its effect, answer.go, replay.go and action.go answer.
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
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
)

// Options configure the middleware. Store, Routes and Tenant are required.
type Options struct {
	// Executor, if set, runs the routes' commands: one shared with the
	// other surfaces of a configuration. Otherwise New builds one from
	// the options below that configure it (Store, Actor, RecordDeadline,
	// MaxWait, StatusBase, Admit, MaxTarget, MaxApprovalCommand, Recorded,
	// ReplayCache, Logger, Audit, Observer).
	Executor *keyed.Executor
	Store    keyed.Store
	Routes   []Route
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
	Admit func(ctx context.Context, tenant string, a keyed.Admission) (settle func(created, live bool), p *contract.Problem)
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
	Audit keyed.Recorder
	// Observer, if set, hears how each keyed request ended (the metrics).
	Observer keyed.Observer
}

// Middleware puts the idempotency contract in front of handlers.
type Middleware struct {
	opts   Options
	routes *router
	x      *keyed.Executor
}

// New checks opts and builds the middleware.
func New(opts Options) (*Middleware, error) {
	if (opts.Store == nil && opts.Executor == nil) || opts.Tenant == nil {
		return nil, errors.New("httpidem: Store (or Executor) and Tenant are required")
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
	x := opts.Executor
	if x == nil {
		if x, err = keyed.New(executorOptions(opts)); err != nil {
			return nil, fmt.Errorf("httpidem: %w", err)
		}
	}
	m := &Middleware{opts: opts, routes: rt, x: x}
	names := make([]string, 0, len(routes))
	for _, r := range routes {
		names = append(names, r.name)
	}
	x.Announce(names)
	return m, nil
}

// executorOptions are the options of the executor New builds.
func executorOptions(o Options) keyed.Options {
	return keyed.Options{Store: o.Store, Actor: o.Actor, RecordDeadline: o.RecordDeadline, MaxWait: o.MaxWait,
		StatusBase: o.StatusBase, Admit: o.Admit, MaxTarget: o.MaxTarget, MaxApprovalCommand: o.MaxApprovalCommand,
		Recorded: o.Recorded, ReplayCache: o.ReplayCache, Logger: o.Logger, Audit: o.Audit, Observer: o.Observer}
}

func setDefaults(o *Options) {
	if o.Actor == "" && o.Executor == nil {
		o.Actor = "httpidem"
	}
	if o.Lease <= 0 {
		o.Lease = keyed.DefaultLease
	}
	if o.Retention <= 0 {
		o.Retention = keyed.DefaultRetention
	}
	if o.MaxBody <= 0 {
		o.MaxBody = contract.DefaultMaxBody
	}
	if o.MaxResponse <= 0 {
		o.MaxResponse = contract.DefaultMaxResponse
	}
	if o.MaxWait <= 0 {
		o.MaxWait = keyed.DefaultMaxWait
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
func (m *Middleware) Changed(opID string) { m.x.Changed(opID) }

// Executor is the executor the middleware runs its routes' commands on.
func (m *Middleware) Executor() *keyed.Executor { return m.x }
