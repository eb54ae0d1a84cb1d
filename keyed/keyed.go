// Package keyed is idemgate's one keyed executor (docs/design.md, "One
// contract, every surface"): for one intended action, named by its
// (tenant, namespace, key), it reserves the key before any effect, runs
// the effect once under a fenced lease with heartbeats, records its
// outcome before anyone hears it, replays a final answer, refuses a
// changed command, waits for a copy in flight, asks a human first when
// the policy says so, and keeps an honest unknown. It knows no
// transport: every surface (an HTTP route and the Go middleware in
// httpidem, an action, an MCP tool call in mcpproxy, a queue message in
// inbox, a signed webhook) is an adapter that maps its transport to a
// Command and an Effect, and the Result back.
//
// execute.go is the walk of one command (reserve, then run, replay or
// refuse); existing.go a key that has an operation already; run.go an
// effect under its lease and the recording of its outcome; approval.go a
// human's decision first; wait.go copies in flight; report.go what every
// step tells the audit log, the logs and the Observer.
package keyed

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Store is what the executor needs of a store: the steps of a keyed
// write and the reads that answer its retries. A ledger.Store is one, and
// so is one bound to a caller's transaction.
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

// INTERIM until i30-ns: var _ Store = ledger.Store(nil)

// Options configure an executor. Store is required.
type Options struct {
	Store Store
	// Actor is recorded in each operation's history (default "idemgate").
	Actor string
	// RecordDeadline bounds how long an outcome is retried against a
	// store that is briefly unavailable, the answer held meanwhile
	// (default 30s). Past it the caller gets the answer unrecorded
	// (Result.Unrecorded), and the operation becomes unknown when its
	// lease lapses.
	RecordDeadline time.Duration
	// MaxWait caps Command.Wait (default 60s).
	MaxWait time.Duration
	// StatusBase, if set, is the control API prefix whose status resource
	// problems and acceptances link to (contract.ControlPrefix).
	StatusBase string
	// Admit, if set, is asked before a command may reserve a new
	// operation for tenant, with what it would hold; a problem (429
	// rate_limited, say) refuses it with nothing reserved. A retry of a
	// key that exists is never refused by it: it adds nothing. An admitted
	// command calls settle once, at its end, with whether it created the
	// operation and left it live (not yet final), so that budgets stay
	// true.
	Admit func(ctx context.Context, tenant string, a Admission) (settle func(created, live bool), p *contract.Problem)
	// MaxTarget bounds a command's target (default 8 KiB), and
	// MaxApprovalCommand the command an approval holds and shows (default
	// 64 KiB): each is kept on the operation and copied into its audit
	// events or its approval. Past them: payload_too_large, nothing
	// reserved.
	MaxTarget          int
	MaxApprovalCommand int
	// Recorded, if set, hears each final operation this executor
	// recorded, with its stored answer (for budgets of stored bytes).
	Recorded func(op *ledger.Operation)
	// ReplayCache bounds, in bytes, the final operations kept in memory to
	// answer replays without the store (default 32 MiB; negative: none).
	// It holds only what the store has durably recorded, so it is off for
	// a store that says it acknowledges before the disk (ledger.Relaxed).
	ReplayCache int64
	Logger      *slog.Logger
	// Audit, if set, hears the audit events that record no transition
	// (replays, conflicts, duplicates, locks, retries answered as they
	// stand, answers that could not be recorded): docs/design.md, "Audit
	// log".
	Audit Recorder
	// Observer, if set, hears how each command ended (the metrics).
	Observer Observer
}

// Executor runs keyed commands. It is safe for concurrent use, and one
// serves every surface of a configuration: the requests waiting on an
// operation hear at once that another surface of this process ended it.
type Executor struct {
	opts      Options
	waiters   *waiters
	cache     *replayCache
	summaries summaries
}

// New checks opts and builds an executor.
func New(opts Options) (*Executor, error) {
	if opts.Store == nil {
		return nil, errors.New("keyed: Options.Store is required")
	}
	setDefaults(&opts)
	x := &Executor{opts: opts, waiters: newWaiters()}
	if opts.ReplayCache > 0 && !ledger.IsRelaxed(opts.Store) {
		x.cache = newReplayCache(opts.ReplayCache)
	}
	return x, nil
}

// DefaultRecordDeadline, DefaultMaxWait, DefaultMaxTarget and
// DefaultMaxApprovalCommand are Options' defaults, exported once for
// whoever configures an executor.
const (
	DefaultRecordDeadline     = 30 * time.Second
	DefaultMaxWait            = time.Minute
	DefaultMaxTarget          = 8 << 10
	DefaultMaxApprovalCommand = 64 << 10
	DefaultReplayCache        = 32 << 20
)

func setDefaults(o *Options) {
	if o.Actor == "" {
		o.Actor = "idemgate"
	}
	if o.RecordDeadline <= 0 {
		o.RecordDeadline = DefaultRecordDeadline
	}
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.MaxTarget <= 0 {
		o.MaxTarget = DefaultMaxTarget
	}
	if o.MaxApprovalCommand <= 0 {
		o.MaxApprovalCommand = DefaultMaxApprovalCommand
	}
	if o.ReplayCache == 0 {
		o.ReplayCache = DefaultReplayCache
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Store is the executor's store, for an adapter's reads (an action's
// history, a status tool's lookup).
func (x *Executor) Store() Store { return x.opts.Store }

// StatusBase is Options.StatusBase.
func (x *Executor) StatusBase() string { return x.opts.StatusBase }

// Changed tells the commands waiting on an operation that it changed
// elsewhere: decided or resolved on the web page, say.
func (x *Executor) Changed(opID string) { x.waiters.signal(opID) }
