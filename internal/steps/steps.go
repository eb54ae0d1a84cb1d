// Package steps is the part of every store that does not depend on SQL:
// which guarded transition each ledger.Store call makes, how a reservation
// that finds its key taken is settled, and, when a guard fails, why. A store
// supplies a Driver that runs single guarded statements; the stores then
// differ only in their SQL.
package steps

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// ErrGuard is what a Driver returns when a guarded statement matched
// nothing: the key is taken (Insert), or the operation is not in the state,
// or not held by the owner, that the change requires (Apply, ExtendLease).
var ErrGuard = errors.New("guard did not match")

// KeyTaken is an ErrGuard from Insert that already carries the operation
// holding the key (read in the same round trip), so that a replay costs
// one statement.
type KeyTaken struct {
	Op     *ledger.Operation
	Lapsed bool // executing past its lease by the store's clock
}

func (k *KeyTaken) Error() string { return "key taken by " + k.Op.ID }

// Unwrap makes errors.Is(err, ErrGuard) true.
func (k *KeyTaken) Unwrap() error { return ErrGuard }

// Change is one guarded transition, in domain terms; a Driver turns it into
// one statement that updates the operation and writes its history row.
type Change struct {
	Step   ledger.Step
	From   ledger.State // the one legal source (ledger.Source): the guard
	To     ledger.State
	ID     string
	Actor  string
	Reason string
	Owner  *ledger.Lease // owner steps: the guard also requires its token and fence

	NewToken string        // acquire, resend: the new owner token
	Lease    time.Duration // acquire, resend: the new lease
	// RunID, TraceID: acquire, resend: the sender's, for the audit log
	// ("" keeps the operation's).
	RunID, TraceID string

	Response  *ledger.Response // complete, resolve, deny: what retries will get
	ResultRef string
	ErrorCode string
}

// Driver runs a store's statements. Each call is one atomic statement.
type Driver interface {
	// Insert creates the operation p describes with the given id (and, for
	// a leased reservation, owner token) and its first history row; it
	// returns ErrGuard if (tenant, namespace, key) or a business or
	// concurrency key is taken, as a *KeyTaken when it could read the
	// key's operation at once.
	Insert(ctx context.Context, id, token string, p ledger.ReserveParams) (*ledger.Operation, error)
	// Existing reads the operation holding (tenant, namespace, key), and
	// whether it is executing past its lease by the store's clock.
	Existing(ctx context.Context, k ledger.OpKey) (op *ledger.Operation, lapsed bool, err error)
	// Apply makes c, or returns ErrGuard. The operation it returns need not
	// carry the stored response: the caller knows what it wrote.
	Apply(ctx context.Context, c Change) (*ledger.Operation, error)
	// ExtendLease sets the owner's lease to the store's now + d, unless it
	// has lapsed.
	ExtendLease(ctx context.Context, l ledger.Lease, d time.Duration) (time.Time, error)
	Get(ctx context.Context, id string) (*ledger.Operation, error)
	// Holder returns the operation holding a business key (business) or,
	// among live operations, a concurrency key, on the route.
	Holder(ctx context.Context, tenant, route string, business bool, value string) (*ledger.Operation, error)
	// OwnerToken returns the token of the operation's latest owner, as
	// stored: owner steps keep it, and the expiry marks it, so that it
	// matches no owner step but the completion after the lapse.
	OwnerToken(ctx context.Context, id string) (string, error)
	ApprovalDriver
	EffectDriver
}

// Make runs c through d. When the guard fails it reads the operation to say
// why: not found, a stale owner, or an illegal move.
func Make(ctx context.Context, d Driver, c Change) (*ledger.Operation, error) {
	from, err := ledger.Source(c.Step, c.To)
	if err != nil {
		return nil, err
	}
	c.From = from
	op, err := d.Apply(ctx, c)
	if err == nil {
		op.Response = c.Response
		return op, nil
	}
	if !errors.Is(err, ErrGuard) {
		return nil, err
	}
	current, err := d.Get(ctx, c.ID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Step, err)
	}
	if c.Owner != nil {
		if done, err := alreadyDone(ctx, d, c, current); done || err != nil {
			return current, err
		}
		return nil, ledger.OwnerError(c.Step, *c.Owner, current, c.To)
	}
	if err := ledger.Check(c.Step, current.State, c.To); err != nil {
		return nil, fmt.Errorf("%s %s: %w", c.Step, c.ID, err)
	}
	if c.Step == ledger.StepAcquire && current.Approval != nil {
		// Prepared, yet not taken: its approval is not granted, or no
		// longer good by the store's clock.
		return current, fmt.Errorf("%s %s: approval %s is %s: %w", c.Step, c.ID, current.Approval.ID,
			current.Approval.Status, ledger.ErrApprovalRequired)
	}
	// Legal now, but not when the statement ran: a concurrent step (or, for
	// an expiry, a lease extended in between) got there first.
	return nil, fmt.Errorf("%s %s: %w: changed concurrently", c.Step, c.ID, ledger.ErrIllegalTransition)
}

// alreadyDone reports whether an owner step that failed its guard is one
// this owner already made, whose reply was lost (a timeout, a reset): same
// fence, same token, and the operation in the step's target state. Its retry
// then succeeds, with the operation as stored, instead of looking fenced out.
// The same lease asking another outcome of an operation it settled already
// is told so (ErrSettledOtherwise), not that another owner took it.
func alreadyDone(ctx context.Context, d Driver, c Change, current *ledger.Operation) (bool, error) {
	if current.Fence != c.Owner.Fence || current.State != c.To && !current.State.Final() {
		return false, nil
	}
	token, err := d.OwnerToken(ctx, c.ID)
	if err != nil {
		return false, fmt.Errorf("%s: %w", c.Step, err)
	}
	if subtle.ConstantTimeCompare([]byte(token), []byte(c.Owner.Token)) != 1 {
		return false, nil
	}
	if current.State != c.To {
		return true, fmt.Errorf("%s %s: %w: %w: it is %s, not %s", c.Step, c.ID, ledger.ErrSettledOtherwise,
			ledger.ErrIllegalTransition, current.State, c.To)
	}
	return true, nil
}

// Reserve implements ledger.Store.Reserve on d.
func Reserve(ctx context.Context, d Driver, p ledger.ReserveParams) (ledger.Reservation, error) {
	if err := p.Validate(); err != nil {
		return ledger.Reservation{}, err
	}
	if p.ID == "" {
		p.ID, p.Token = ledger.NewID(), ledger.NewToken()
	}
	if p.Approval != nil && p.Approval.ID == "" {
		a := *p.Approval
		a.ID = ledger.NewApprovalID()
		p.Approval = &a
	}
	// A row purged between our insert and our read frees the key: try again.
	for range 3 {
		op, err := d.Insert(ctx, p.ID, p.Token, p)
		if err == nil {
			return created(op, p), nil
		}
		if !errors.Is(err, ErrGuard) {
			return ledger.Reservation{}, fmt.Errorf("reserve: %w", err)
		}
		var r ledger.Reservation
		var taken *KeyTaken
		if errors.As(err, &taken) {
			r, err = settle(ctx, d, p, taken.Op, taken.Lapsed)
		} else {
			r, err = existing(ctx, d, p)
		}
		if !errors.Is(err, ledger.ErrNotFound) {
			return r, err
		}
		// Not the key: the business key or the concurrency key, then.
		if r, found, err := holder(ctx, d, p); found {
			return r, err
		}
	}
	return ledger.Reservation{}, fmt.Errorf("reserve: key %q of %s keeps vanishing", p.Key, p.Namespace)
}

// created is the reservation of an operation this reservation created.
func created(op *ledger.Operation, p ledger.ReserveParams) ledger.Reservation {
	r := ledger.Reservation{Op: op, Created: true}
	if op.State == ledger.Executing {
		r.Lease = &ledger.Lease{OpID: op.ID, Token: p.Token, Fence: op.Fence, Until: op.LeaseUntil, Actor: p.Actor}
	}
	return r
}

// mine reports whether op is the operation that this very reservation
// created, repeated after its reply was lost: same id, and, for a leased
// one, still executing under its first lease, with its token.
func mine(ctx context.Context, d Driver, p ledger.ReserveParams, op *ledger.Operation, lapsed bool) (bool, error) {
	switch {
	case op.ID != p.ID || lapsed:
		return false, nil
	case p.Lease == 0:
		return op.State == ledger.Prepared && op.Attempts == 0, nil
	case op.State != ledger.Executing || op.Attempts != 1:
		return false, nil
	}
	token, err := d.OwnerToken(ctx, op.ID)
	if err != nil {
		return false, fmt.Errorf("reserve: %w", err)
	}
	return subtle.ConstantTimeCompare([]byte(token), []byte(p.Token)) == 1, nil
}

// holder settles a reservation refused for its business or concurrency key.
// Found is false when the holder has gone meanwhile: the caller tries again.
func holder(ctx context.Context, d Driver, p ledger.ReserveParams) (ledger.Reservation, bool, error) {
	if p.BusinessKey != "" {
		op, err := d.Holder(ctx, p.Tenant, p.Route, true, p.BusinessKey)
		if err == nil {
			return ledger.Reservation{Op: op, Duplicate: true}, true, nil
		}
		if !errors.Is(err, ledger.ErrNotFound) {
			return ledger.Reservation{}, true, fmt.Errorf("reserve: %w", err)
		}
	}
	if p.ConcurrencyKey != "" {
		op, err := d.Holder(ctx, p.Tenant, p.Route, false, p.ConcurrencyKey)
		if err == nil && op.State == ledger.Prepared && op.Approval != nil && op.Approval.Lapsed(time.Now()) {
			// Held by an approval past its time that no sweep has expired
			// yet (a Go service may run none): expire it, and try again.
			expired, eerr := d.ExpireApproval(ctx, op.Approval.ID)
			if eerr != nil {
				return ledger.Reservation{}, true, fmt.Errorf("reserve: %w", eerr)
			}
			if expired {
				return ledger.Reservation{}, false, nil
			}
		}
		if err == nil {
			return ledger.Reservation{Op: op}, true, fmt.Errorf("reserve: %s holds %q: %w", op.ID, p.ConcurrencyKey,
				ledger.ErrConcurrencyLocked)
		}
		if !errors.Is(err, ledger.ErrNotFound) {
			return ledger.Reservation{}, true, fmt.Errorf("reserve: %w", err)
		}
	}
	return ledger.Reservation{}, false, nil
}

// existing settles a reservation that found its key taken. A lapsed lease
// is expired first: it is never a free key. Then a different fingerprint is
// refused, with the operation for the caller's problem response.
func existing(ctx context.Context, d Driver, p ledger.ReserveParams) (ledger.Reservation, error) {
	op, lapsed, err := d.Existing(ctx, p.OpKey())
	if err != nil {
		return ledger.Reservation{}, fmt.Errorf("reserve: read existing: %w", err)
	}
	return settle(ctx, d, p, op, lapsed)
}

// settle answers a reservation with the operation that holds its key:
// its own, when it is a repeat of one whose reply was lost.
func settle(ctx context.Context, d Driver, p ledger.ReserveParams, op *ledger.Operation, lapsed bool) (ledger.Reservation, error) {
	if ok, err := mine(ctx, d, p, op, lapsed); ok || err != nil {
		return created(op, p), err
	}
	if lapsed {
		expired, err := Make(ctx, d, Change{Step: ledger.StepExpire, To: ledger.Unknown, ID: op.ID,
			Actor: ledger.ActorLeaseExpiry, Reason: "lease expired", ErrorCode: "lease_expired"})
		switch {
		case err == nil:
			op = expired
		case errors.Is(err, ledger.ErrIllegalTransition):
			// Someone moved it first: the owner completed, or a sweep ran.
			if op, err = d.Get(ctx, op.ID); err != nil {
				return ledger.Reservation{}, fmt.Errorf("reserve: %w", err)
			}
		default:
			return ledger.Reservation{}, fmt.Errorf("reserve: %w", err)
		}
	}
	r := ledger.Reservation{Op: op}
	if op.Fingerprint != p.Fingerprint {
		return r, fmt.Errorf("reserve %s: %w", op.ID, ledger.ErrFingerprintMismatch)
	}
	return r, nil
}

// Acquire implements ledger.Store.Acquire on d.
func Acquire(ctx context.Context, d Driver, p ledger.AcquireParams) (ledger.Reservation, error) {
	if err := p.Validate(); err != nil {
		return ledger.Reservation{}, err
	}
	step := ledger.StepAcquire
	if p.Resend {
		step = ledger.StepResend
	}
	token := ledger.NewToken()
	op, err := Make(ctx, d, Change{Step: step, To: ledger.Executing, ID: p.ID, Actor: p.Actor, Reason: p.Reason,
		NewToken: token, Lease: p.Lease, RunID: p.RunID, TraceID: p.TraceID})
	if err != nil {
		return ledger.Reservation{Op: op}, err // op: the one waiting, with ErrApprovalRequired
	}
	return ledger.Reservation{Op: op, Lease: &ledger.Lease{OpID: op.ID, Token: token, Fence: op.Fence,
		Until: op.LeaseUntil, Actor: p.Actor}}, nil
}

// Heartbeat implements ledger.Store.Heartbeat on d.
func Heartbeat(ctx context.Context, d Driver, l ledger.Lease, dur time.Duration) (ledger.Lease, error) {
	if dur < ledger.MinDuration {
		return l, fmt.Errorf("heartbeat: %w: lease %v, want at least %v", ledger.ErrInvalid, dur, ledger.MinDuration)
	}
	until, err := d.ExtendLease(ctx, l, dur)
	if errors.Is(err, ErrGuard) {
		current, err := d.Get(ctx, l.OpID)
		if err != nil {
			return l, fmt.Errorf("heartbeat: %w", err)
		}
		if current.State == ledger.Executing && current.Fence == l.Fence {
			// A lapsed lease belongs to the expiry, swept or not: it is
			// never extended, so it can never be a free key again.
			return l, fmt.Errorf("heartbeat %s: lease lapsed, or not this owner's: %w", l.OpID, ledger.ErrStaleOwner)
		}
		return l, ledger.OwnerError("heartbeat", l, current, ledger.Executing)
	}
	if err != nil {
		return l, err
	}
	l.Until = until
	return l, nil
}

// Complete implements ledger.Store.Complete on d.
func Complete(ctx context.Context, d Driver, l ledger.Lease, o ledger.Outcome) (*ledger.Operation, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	c := Change{Step: ledger.StepComplete, To: o.State, ID: l.OpID, Actor: l.Actor, Reason: o.Reason,
		Owner: &l, Response: o.Response, ResultRef: o.ResultRef, ErrorCode: o.ErrorCode}
	op, err := Make(ctx, d, c)
	if err == nil || !o.AfterLapse || !errors.Is(err, ledger.ErrStaleOwner) {
		return op, err
	}
	// The lease lapsed and the expiry took the operation: its owner may
	// still settle it if nobody has moved it since (the statement's guard:
	// the expiry's mark on this token, this fence, still unknown).
	c.Step, c.Reason = ledger.StepCompleteLapsed, "after its lease lapsed: "+o.Reason
	return Make(ctx, d, c)
}

// Release implements ledger.Store.Release on d.
func Release(ctx context.Context, d Driver, l ledger.Lease, n ledger.Note) (*ledger.Operation, error) {
	if err := n.Validate(); err != nil {
		return nil, err
	}
	return Make(ctx, d, Change{Step: ledger.StepRelease, To: ledger.Prepared, ID: l.OpID, Actor: l.Actor,
		Reason: n.Reason, Owner: &l, ErrorCode: n.ErrorCode})
}

// MarkUnknown implements ledger.Store.MarkUnknown on d.
func MarkUnknown(ctx context.Context, d Driver, l ledger.Lease, n ledger.Note) (*ledger.Operation, error) {
	if err := n.Validate(); err != nil {
		return nil, err
	}
	return Make(ctx, d, Change{Step: ledger.StepMarkUnknown, To: ledger.Unknown, ID: l.OpID, Actor: l.Actor,
		Reason: n.Reason, Owner: &l, ErrorCode: n.ErrorCode})
}

// Resolve implements ledger.Store.Resolve on d.
func Resolve(ctx context.Context, d Driver, p ledger.ResolveParams) (*ledger.Operation, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return Make(ctx, d, Change{Step: ledger.StepResolve, To: p.To, ID: p.ID, Actor: p.Actor, Reason: p.Note,
		Response: p.Response, ResultRef: p.ResultRef})
}

// BatchLimit refuses a non-positive batch size for the sweeps.
func BatchLimit(op string, limit int) error {
	if limit <= 0 {
		return fmt.Errorf("%s: %w: limit must be positive", op, ledger.ErrInvalid)
	}
	return nil
}
