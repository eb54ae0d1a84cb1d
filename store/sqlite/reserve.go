package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemgate/idemgate/ledger"
)

// reserveSQL inserts the operation unless (tenant, key) is taken: the unique
// constraint is the arbiter, and the single writer makes the rest trivial.
const reserveSQL = `INSERT INTO idem_operations (id, tenant, key, route, fingerprint, state, attempts, owner_token,
	fence, lease_until, business_key, concurrency_key, retention_us, created_at, updated_at, expires_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?7, ?9, ?10, ?11, ?12, ?13, ?13, ?13 + ?12)
ON CONFLICT (tenant, key) DO NOTHING
RETURNING ` + opColumns

// Reserve implements ledger.Store. The insert, the history row and, for an
// existing key, the read and a lapsed lease's expiry are one transaction.
func (s *Store) Reserve(ctx context.Context, p ledger.ReserveParams) (res ledger.Reservation, err error) {
	if err := p.Validate(); err != nil {
		return res, err
	}
	err = s.tx(ctx, "reserve", func(tx *sql.Tx) error {
		res, err = s.reserveTx(ctx, tx, p)
		return err
	})
	if err == nil && res.Op.Fingerprint != p.Fingerprint {
		// Checked after the commit, which keeps a lapsed lease's expiry.
		return res, fmt.Errorf("reserve %s: %w", res.Op.ID, ledger.ErrFingerprintMismatch)
	}
	return res, err
}

func (s *Store) reserveTx(ctx context.Context, tx *sql.Tx, p ledger.ReserveParams) (ledger.Reservation, error) {
	now := s.now()
	state, attempts, reason := p.State(), 0, "reserve"
	token := ledger.NewToken()
	var tokenArg, leaseArg any
	if state == ledger.Executing {
		attempts, reason, tokenArg, leaseArg = 1, "reserve with lease", token, now.Add(p.Lease).UnixMicro()
	}
	op, err := scanOp(tx.QueryRowContext(ctx, reserveSQL, ledger.NewID(), p.Tenant, p.Key, p.Route, p.Fingerprint,
		string(state), attempts, tokenArg, leaseArg, null(p.BusinessKey), null(p.ConcurrencyKey),
		p.Retention.Microseconds(), now.UnixMicro()))
	if err == nil {
		if _, err := tx.ExecContext(ctx, historySQL, op.ID, nil, string(state), now.UnixMicro(), p.Actor, reason); err != nil {
			return ledger.Reservation{}, mapErr("reserve: history", err)
		}
		res := ledger.Reservation{Op: op, Created: true}
		if tokenArg != nil {
			res.Lease = &ledger.Lease{OpID: op.ID, Token: token, Fence: op.Fence, Until: op.LeaseUntil, Actor: p.Actor}
		}
		return res, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return ledger.Reservation{}, mapErr("reserve", err)
	}
	return s.existing(ctx, tx, p)
}

// existing returns the operation holding p's key, first making it unknown if
// its lease has lapsed: a lapsed lease is never a free key.
func (s *Store) existing(ctx context.Context, tx *sql.Tx, p ledger.ReserveParams) (ledger.Reservation, error) {
	op, err := scanOp(tx.QueryRowContext(ctx, `SELECT `+opColumns+` FROM idem_operations WHERE tenant = ? AND key = ?`,
		p.Tenant, p.Key))
	if err != nil {
		return ledger.Reservation{}, mapErr("reserve: read existing", err)
	}
	if op.State == ledger.Executing && op.LeaseUntil.Before(s.now()) {
		op, err = s.transitionTx(ctx, tx, change{step: ledger.StepExpire, to: ledger.Unknown, id: op.ID,
			actor: ledger.ActorLeaseExpiry, reason: "lease expired", query: expireOneSQL})
		if err != nil {
			return ledger.Reservation{}, fmt.Errorf("reserve: %w", err)
		}
	}
	return ledger.Reservation{Op: op}, nil
}
