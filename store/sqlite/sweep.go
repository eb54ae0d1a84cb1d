package sqlite

import (
	"context"

	"github.com/idemgate/idemgate/internal/steps"
	"github.com/idemgate/idemgate/ledger"
)

// expireSQL makes a batch of lapsed leases unknown, marking each owner's
// token (lapsedMark); the update trigger records each in the history. The write lock serializes sweepers, in this
// process or another, so each lapsed lease is expired once.
const expireSQL = `UPDATE idem_operations SET state = 'unknown', owner_token = ` + lapsedMark + `owner_token, lease_until = NULL,
	probe_token = NULL, probe_until = NULL, probe_next = NULL,
	last_error = 'lease_expired', updated_at = ` + nowUS + `, expires_at = ` + nowUS + ` + retention_us,
	last_actor = ?2, last_reason = 'lease expired'
WHERE id IN (SELECT id FROM idem_operations WHERE state = 'executing' AND lease_until < ` + nowUS + `
	ORDER BY lease_until LIMIT ?1)`

// purgeSQL deletes a batch of prepared and final operations past their
// retention; the delete trigger takes their history with them.
const purgeSQL = `DELETE FROM idem_operations WHERE id IN (
	SELECT id FROM idem_operations
	WHERE state IN ('prepared', 'succeeded', 'failed') AND expires_at < ` + nowUS + `
	ORDER BY expires_at LIMIT ?1)`

// ExpireLeases implements ledger.Store.
func (s *Store) ExpireLeases(ctx context.Context, limit int) (int, error) {
	return s.batch(ctx, "expire leases", expireSQL, limit, ledger.ActorLeaseExpiry)
}

// Purge implements ledger.Store.
func (s *Store) Purge(ctx context.Context, limit int) (int, error) {
	ops, err := s.batch(ctx, "purge", purgeSQL, limit)
	if err != nil {
		return ops, err
	}
	effects, err := s.batch(ctx, "purge effects", purgeEffectsSQL, limit)
	return ops + effects, err
}

func (s *Store) batch(ctx context.Context, op, query string, limit int, args ...any) (int, error) {
	if err := steps.BatchLimit(op, limit); err != nil {
		return 0, err
	}
	return step(s, ctx, durable, func(ctx context.Context, d driver) (int, error) {
		res, err := d.q.(*writeConn).ExecContext(ctx, query, append([]any{limit}, args...)...)
		if err != nil {
			return 0, mapErr(op, err)
		}
		n, err := res.RowsAffected()
		return int(n), mapErr(op, err)
	})
}
