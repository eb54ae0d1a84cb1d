package steps

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// Kind says what a step asks of the executor that runs it. On SQLite it
// decides how the step's batch commits; PostgreSQL decides per statement.
type Kind int

const (
	// Durable steps wait for the disk: what they record is what a later
	// answer relies on.
	Durable Kind = iota
	// Reserving steps may create an operation or an effect: durable, and
	// refused below the store's free-space floor.
	Reserving
	// Owning steps are an owner's completion, release, move to unknown or
	// heartbeat: with durability=relaxed they may commit before the disk.
	Owning
	// Enqueuing steps write several effects: durable, refused below the
	// free-space floor, and all or nothing, so on PostgreSQL they run in
	// a transaction of their own.
	Enqueuing
)

// Executor runs one step's statements as one atomic unit, as river's
// driver hands its methods an executor: a store's own (the SQLite
// writer's group commit, PostgreSQL's batched statements), or a caller's
// transaction, in which the step commits or rolls back with the caller's
// own writes.
type Executor interface {
	// Exec runs fn on a Driver. When what fn did was undone (its batch
	// failed as a whole, or its caller left before it ran), the error is
	// a *VoidError, and fn's results must not be used.
	Exec(ctx context.Context, k Kind, fn func(context.Context, Driver) error) error
}

// VoidError is an executor's word that a step's work was undone, or never
// done: whatever it computed is not what the store holds.
type VoidError struct{ Err error }

func (e *VoidError) Error() string { return e.Err.Error() }

// Unwrap gives the reason, which the caller sees.
func (e *VoidError) Unwrap() error { return e.Err }

// Steps implements ledger.Steps on an Executor. Both stores embed one on
// their own executor and hand out one on a caller's transaction (their Tx
// method), so that each step has one implementation, whichever way it
// commits.
type Steps struct{ x Executor }

var _ ledger.Steps = Steps{}

// On returns the steps run by x.
func On(x Executor) Steps { return Steps{x: x} }

// run runs fn on s's executor and returns its result, or the zero value
// when the executor says its work was void.
func run[T any](ctx context.Context, s Steps, k Kind, fn func(context.Context, Driver) (T, error)) (T, error) {
	var out T
	err := s.x.Exec(ctx, k, func(ctx context.Context, d Driver) error {
		var err error
		out, err = fn(ctx, d)
		return err
	})
	var void *VoidError
	if errors.As(err, &void) {
		var zero T
		return zero, void.Err
	}
	return out, err
}

// Reserve implements ledger.Steps.
func (s Steps) Reserve(ctx context.Context, p ledger.ReserveParams) (ledger.Reservation, error) {
	return run(ctx, s, Reserving, func(ctx context.Context, d Driver) (ledger.Reservation, error) {
		return Reserve(ctx, d, p)
	})
}

// Acquire implements ledger.Steps. It waits for the disk, as a
// reservation does: a lease lost in a crash would let a second owner send
// again.
func (s Steps) Acquire(ctx context.Context, p ledger.AcquireParams) (ledger.Reservation, error) {
	return run(ctx, s, Durable, func(ctx context.Context, d Driver) (ledger.Reservation, error) {
		return Acquire(ctx, d, p)
	})
}

// Heartbeat implements ledger.Steps.
func (s Steps) Heartbeat(ctx context.Context, l ledger.Lease, dur time.Duration) (ledger.Lease, error) {
	return run(ctx, s, Owning, func(ctx context.Context, d Driver) (ledger.Lease, error) {
		return Heartbeat(ctx, d, l, dur)
	})
}

// Complete implements ledger.Steps.
func (s Steps) Complete(ctx context.Context, l ledger.Lease, o ledger.Outcome) (*ledger.Operation, error) {
	return run(ctx, s, Owning, func(ctx context.Context, d Driver) (*ledger.Operation, error) {
		return Complete(ctx, d, l, o)
	})
}

// Release implements ledger.Steps.
func (s Steps) Release(ctx context.Context, l ledger.Lease, n ledger.Note) (*ledger.Operation, error) {
	return run(ctx, s, Owning, func(ctx context.Context, d Driver) (*ledger.Operation, error) {
		return Release(ctx, d, l, n)
	})
}

// MarkUnknown implements ledger.Steps.
func (s Steps) MarkUnknown(ctx context.Context, l ledger.Lease, n ledger.Note) (*ledger.Operation, error) {
	return run(ctx, s, Owning, func(ctx context.Context, d Driver) (*ledger.Operation, error) {
		return MarkUnknown(ctx, d, l, n)
	})
}

// Resolve implements ledger.Steps.
func (s Steps) Resolve(ctx context.Context, p ledger.ResolveParams) (*ledger.Operation, error) {
	return run(ctx, s, Durable, func(ctx context.Context, d Driver) (*ledger.Operation, error) {
		return Resolve(ctx, d, p)
	})
}

// Approve implements ledger.Steps.
func (s Steps) Approve(ctx context.Context, p ledger.DecisionParams) (*ledger.Approval, error) {
	return run(ctx, s, Durable, func(ctx context.Context, d Driver) (*ledger.Approval, error) {
		return Decide(ctx, d, p, ledger.ApprovalApproved)
	})
}

// Deny implements ledger.Steps.
func (s Steps) Deny(ctx context.Context, p ledger.DecisionParams) (*ledger.Approval, error) {
	return run(ctx, s, Durable, func(ctx context.Context, d Driver) (*ledger.Approval, error) {
		return Decide(ctx, d, p, ledger.ApprovalDenied)
	})
}

// ReopenApproval implements ledger.Steps.
func (s Steps) ReopenApproval(ctx context.Context, p ledger.ReopenParams) (*ledger.Operation, error) {
	return run(ctx, s, Reserving, func(ctx context.Context, d Driver) (*ledger.Operation, error) {
		return Reopen(ctx, d, p)
	})
}

// Enqueue implements ledger.Steps.
func (s Steps) Enqueue(ctx context.Context, effects []ledger.EffectParams) ([]*ledger.Effect, error) {
	effects = slices.Clone(effects) // defaults are filled in
	return run(ctx, s, Enqueuing, func(ctx context.Context, d Driver) ([]*ledger.Effect, error) {
		return Enqueue(ctx, d, effects)
	})
}
