package ledger

import (
	"errors"
	"fmt"
)

// Domain errors. Stores turn driver errors into these at their boundary, so
// callers (the HTTP layer's single status map among them) never see a driver.
var (
	ErrNotFound            = errors.New("operation not found")
	ErrStaleOwner          = errors.New("stale owner: lease token or fence no longer current")
	ErrIllegalTransition   = errors.New("illegal transition")
	ErrFingerprintMismatch = errors.New("key reused with a different request")
	ErrInvalid             = errors.New("invalid argument")
	ErrUnavailable         = errors.New("store unavailable")
	ErrNoSchema            = errors.New("store has no idemgate schema (run: idemgate migrate --store DSN)")
	ErrConcurrencyLocked   = errors.New("another live operation holds the concurrency key")
	// ErrReplyLost comes with ErrUnavailable when the store may have made
	// the step all the same: a connection cut after the statement was
	// sent, a caller that stopped waiting for a step already queued. A
	// caller that repeats the step with the same identity (an owner's
	// lease, a reservation's ID and Token) is told whether it happened;
	// without it, the step was not made.
	ErrReplyLost = errors.New("the store's reply was lost: the step may have been made")
	// ErrSettledOtherwise comes with ErrIllegalTransition when an owner's
	// step finds the operation settled already by its own lease (its
	// token and fence) in another state: a repeat asking for another
	// outcome, which changes nothing. The operation is returned with it.
	ErrSettledOtherwise = errors.New("settled already by this lease, otherwise")
)

// invalid wraps ErrInvalid with what is wrong.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// OwnerError explains why an owner step was refused, given the operation as it
// stands now. A fence that is no longer current, or a token that is not the
// owner's, is ErrStaleOwner. A current owner whose operation has moved on
// without it (its lease lapsed and made it unknown) is both ErrStaleOwner and
// ErrIllegalTransition: the owner's view is stale and the move is illegal.
func OwnerError(step Step, l Lease, current *Operation, to State) error {
	switch {
	case current.Fence != l.Fence:
		return fmt.Errorf("%s %s: fence %d, current %d: %w", step, l.OpID, l.Fence, current.Fence, ErrStaleOwner)
	case current.State != Executing:
		return fmt.Errorf("%s %s: %w: %w", step, l.OpID, ErrStaleOwner,
			&TransitionError{From: current.State, To: to, Step: step})
	default:
		return fmt.Errorf("%s %s: owner token mismatch: %w", step, l.OpID, ErrStaleOwner)
	}
}
