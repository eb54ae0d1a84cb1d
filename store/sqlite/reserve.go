package sqlite

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgate/idemgate/ledger"
)

// reserveSQL inserts the operation unless (tenant, key) is taken: the unique
// constraint is the arbiter. The insert trigger writes the history row in
// the same statement.
const reserveSQL = `INSERT INTO idem_operations (id, tenant, key, route, fingerprint, state, attempts, owner_token,
	fence, lease_until, business_key, concurrency_key, retention_us, created_at, updated_at, expires_at,
	last_actor, last_reason)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?7, ?9, ?10, ?11, ?12, ?13, ?13, ?13 + ?12, ?14, ?15)
ON CONFLICT (tenant, key) DO NOTHING`

// Reserve implements ledger.Store.
func (s *Store) Reserve(ctx context.Context, p ledger.ReserveParams) (ledger.Reservation, error) {
	if err := p.Validate(); err != nil {
		return ledger.Reservation{}, err
	}
	now := s.now()
	state, attempts, reason := p.State(), 0, "reserve"
	token := ledger.NewToken()
	var tokenArg, leaseArg any
	if state == ledger.Executing {
		attempts, reason, tokenArg, leaseArg = 1, "reserve with lease", token, now.Add(p.Lease).UnixMicro()
	}
	// A row purged between our insert and our read frees the key: try again.
	for range 3 {
		id := ledger.NewID()
		n, err := s.writeExec(ctx, reserveSQL, id, p.Tenant, p.Key, p.Route, p.Fingerprint, string(state), attempts,
			tokenArg, leaseArg, null(p.BusinessKey), null(p.ConcurrencyKey), p.Retention.Microseconds(),
			now.UnixMicro(), p.Actor, reason)
		if err != nil {
			return ledger.Reservation{}, mapErr("reserve", err)
		}
		if n == 1 {
			op := p.NewOperation(id, now, now.Add(p.Lease), now.Add(p.Retention))
			r := ledger.Reservation{Op: op, Created: true}
			if tokenArg != nil {
				r.Lease = &ledger.Lease{OpID: id, Token: token, Fence: op.Fence, Until: op.LeaseUntil, Actor: p.Actor}
			}
			return r, nil
		}
		res, err := s.existing(ctx, p)
		if errors.Is(err, ledger.ErrNotFound) {
			continue
		}
		return res, err
	}
	return ledger.Reservation{}, fmt.Errorf("reserve: key %q keeps vanishing", p.Key)
}

// existing returns the operation holding p's key, first making it unknown if
// its lease has lapsed: a lapsed lease is never a free key.
func (s *Store) existing(ctx context.Context, p ledger.ReserveParams) (ledger.Reservation, error) {
	op, err := s.GetByKey(ctx, p.Tenant, p.Key)
	if err != nil {
		return ledger.Reservation{}, fmt.Errorf("reserve: read existing: %w", err)
	}
	if op.State == ledger.Executing && op.LeaseUntil.Before(s.now()) {
		expired, err := s.transition(ctx, change{step: ledger.StepExpire, to: ledger.Unknown, id: op.ID,
			actor: ledger.ActorLeaseExpiry, reason: "lease expired", query: expireOneSQL})
		switch {
		case err == nil:
			op = expired
		case errors.Is(err, ledger.ErrIllegalTransition):
			// Someone else moved it first (the owner completed, or a sweep ran).
			if op, err = s.Get(ctx, op.ID); err != nil {
				return ledger.Reservation{}, fmt.Errorf("reserve: %w", err)
			}
		default:
			return ledger.Reservation{}, fmt.Errorf("reserve: %w", err)
		}
	}
	res := ledger.Reservation{Op: op}
	if op.Fingerprint != p.Fingerprint {
		return res, fmt.Errorf("reserve %s: %w", op.ID, ledger.ErrFingerprintMismatch)
	}
	return res, nil
}
