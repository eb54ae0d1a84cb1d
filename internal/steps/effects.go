package steps

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"

	"github.com/idemgate/idemgate/ledger"
)

// EffectDriver is the part of a Driver that keeps effects.
type EffectDriver interface {
	// InsertEffect creates the effect p describes (defaults filled in),
	// with id and its fingerprint, prepared and due now, after every effect
	// enqueued before it; ErrGuard if its derived key is taken.
	InsertEffect(ctx context.Context, id string, p ledger.EffectParams, fingerprint string) (*ledger.Effect, error)
	// EffectByKey reads a tenant's effect by its derived key.
	EffectByKey(ctx context.Context, tenant, key string) (*ledger.Effect, error)
}

// Enqueue implements ledger.Steps.Enqueue on d. Every effect is checked,
// and every key already taken is compared, before the first is written:
// a batch with one bad effect writes none. (In a caller's transaction on
// PostgreSQL another transaction may take a key in between: the error
// then comes after some were written, and the caller rolls back, as after
// any failed step of its transaction.)
func Enqueue(ctx context.Context, d Driver, effects []ledger.EffectParams) ([]*ledger.Effect, error) {
	if len(effects) == 0 {
		return nil, fmt.Errorf("enqueue: %w: no effects", ledger.ErrInvalid)
	}
	out := make([]*ledger.Effect, len(effects))
	prints := make([]string, len(effects))
	seen := map[[2]string]string{}
	for i := range effects {
		p := effects[i].WithDefaults()
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("enqueue %s: %w", p.Key(), err)
		}
		effects[i], prints[i] = p, p.Fingerprint()
		id := [2]string{p.Tenant, p.Key()}
		if fp, dup := seen[id]; dup && fp != prints[i] {
			return nil, fmt.Errorf("enqueue %s: %w: twice in one batch, differently", p.Key(), ledger.ErrFingerprintMismatch)
		}
		seen[id] = prints[i]
		existing, err := enqueued(ctx, d, p, prints[i])
		if err != nil {
			return nil, err
		}
		out[i] = existing
	}
	for i, p := range effects {
		if out[i] != nil {
			continue
		}
		e, err := insertEffect(ctx, d, p, prints[i])
		if err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}

// enqueued returns the effect already under p's key (nil if none), or
// ErrFingerprintMismatch if it does something else.
func enqueued(ctx context.Context, d Driver, p ledger.EffectParams, fingerprint string) (*ledger.Effect, error) {
	e, err := d.EffectByKey(ctx, p.Tenant, p.Key())
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("enqueue %s: %w", p.Key(), err)
	case e.Fingerprint != fingerprint:
		return nil, fmt.Errorf("enqueue %s: %w: the key's effect does something else", p.Key(), ledger.ErrFingerprintMismatch)
	}
	return e, nil
}

// insertEffect writes one new effect; a key taken meanwhile (by the
// effect just before it in this batch, or by another transaction) is
// settled as enqueued settles it.
func insertEffect(ctx context.Context, d Driver, p ledger.EffectParams, fingerprint string) (*ledger.Effect, error) {
	e, err := d.InsertEffect(ctx, ledger.NewEffectID(), p, fingerprint)
	if !errors.Is(err, ErrGuard) {
		if err != nil {
			return nil, fmt.Errorf("enqueue %s: %w", p.Key(), err)
		}
		return e, nil
	}
	e, err = enqueued(ctx, d, p, fingerprint)
	if err == nil && e == nil {
		err = fmt.Errorf("enqueue %s: %w: its key is taken, and its effect is gone", p.Key(), ledger.ErrIllegalTransition)
	}
	return e, err
}

// EffectRefusal says why a delivery's result was refused by its guard,
// given the effect as it stands and its owner token (a lapse, or an
// operator, ends a claim's token). When this very result was recorded
// already (the same claim, and the effect in the outcome's state: a retry
// after a lost reply) it is no refusal: the effect is returned as it
// stands.
func EffectRefusal(e *ledger.Effect, token string, l ledger.EffectLease, to ledger.State) (*ledger.Effect, error) {
	same := e.Fence == l.Fence && token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(l.Token)) == 1
	switch {
	case same && e.State == to:
		return e, nil
	case same && e.State == ledger.Executing:
		return nil, fmt.Errorf("effect result %s: %w: its lease lapsed", e.ID, ledger.ErrStaleOwner)
	case same:
		return nil, fmt.Errorf("effect result %s: %w: its result is recorded already, as %s", e.ID,
			ledger.ErrIllegalTransition, e.State)
	case e.Fence != l.Fence || e.State == ledger.Unknown && e.LastError == "lease_expired":
		return nil, fmt.Errorf("effect result %s: %w: its lease lapsed, or a later claim took it", e.ID,
			ledger.ErrStaleOwner)
	}
	return nil, fmt.Errorf("effect result %s: %w: an operator settled it (%s)", e.ID, ledger.ErrIllegalTransition, e.State)
}

// EffectNotResolvable is the refusal of an operator's resolution of an
// effect that is final or executing.
func EffectNotResolvable(e *ledger.Effect) error {
	return fmt.Errorf("resolve effect %s: %w: it is %s", e.ID, ledger.ErrIllegalTransition, e.State)
}
