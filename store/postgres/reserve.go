package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/ledger"
)

// reserveSQL inserts the operation and its first history row in one
// statement. ON CONFLICT DO NOTHING makes the unique (tenant, key)
// constraint the arbiter: of concurrent reservations exactly one inserts,
// and the others (having waited for its commit) insert nothing.
const reserveSQL = `WITH ins AS (
	INSERT INTO idem_operations (id, tenant, key, route, fingerprint, state, attempts, owner_token, fence,
		lease_until, business_key, concurrency_key, retention_us, created_at, updated_at, expires_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7::integer, $8, $7::integer,
		CASE WHEN $9::bigint > 0 THEN now() + $9::bigint * interval '1 microsecond' END,
		$10, $11, $12::bigint, now(), now(), now() + $12::bigint * interval '1 microsecond')
	ON CONFLICT (tenant, key) DO NOTHING
	RETURNING id, state, created_at, lease_until, expires_at
), hist AS (
	INSERT INTO idem_transitions (op_id, from_state, to_state, at, actor, reason)
	SELECT id, NULL, state, created_at, $13, $14 FROM ins
)
SELECT created_at, lease_until, expires_at FROM ins`

// existingSQL reads the operation that holds a key, and whether its lease has
// lapsed by the database's clock.
const existingSQL = `SELECT ` + opColumns + `, (state = 'executing' AND lease_until < now())
	FROM idem_operations WHERE tenant = $1 AND key = $2`

// Reserve implements ledger.Store.
func (s *Store) Reserve(ctx context.Context, p ledger.ReserveParams) (ledger.Reservation, error) {
	if err := p.Validate(); err != nil {
		return ledger.Reservation{}, err
	}
	state, attempts, reason := p.State(), 0, "reserve"
	token := ledger.NewToken()
	var tokenArg *string
	if state == ledger.Executing {
		attempts, reason, tokenArg = 1, "reserve with lease", &token
	}
	// A row purged between our insert and our read frees the key: try again.
	for range 3 {
		id := ledger.NewID()
		var created, expires time.Time
		var leaseUntil *time.Time
		err := s.pool.QueryRow(ctx, reserveSQL, id, p.Tenant, p.Key, p.Route, p.Fingerprint,
			string(state), attempts, tokenArg, micros(p.Lease), nullable(p.BusinessKey), nullable(p.ConcurrencyKey),
			micros(p.Retention), p.Actor, reason).Scan(&created, &leaseUntil, &expires)
		if err == nil {
			op := p.NewOperation(id, created, deref(leaseUntil), expires)
			res := ledger.Reservation{Op: op, Created: true}
			if tokenArg != nil {
				res.Lease = &ledger.Lease{OpID: op.ID, Token: token, Fence: op.Fence, Until: op.LeaseUntil, Actor: p.Actor}
			}
			return res, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return ledger.Reservation{}, mapErr("reserve", err)
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
	var lapsed bool
	op, err := scanOp(scanExtra{s.pool.QueryRow(ctx, existingSQL, p.Tenant, p.Key), &lapsed})
	if err != nil {
		return ledger.Reservation{}, mapErr("reserve: read existing", err)
	}
	if lapsed {
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

// scanExtra scans the operation columns followed by extra destinations.
type scanExtra struct {
	row   pgx.Row
	extra any
}

func (r scanExtra) Scan(dest ...any) error { return r.row.Scan(append(dest, r.extra)...) }
