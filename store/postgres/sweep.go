package postgres

import (
	"context"

	"github.com/idemgate/idemgate/internal/steps"
	"github.com/idemgate/idemgate/ledger"
)

// expireSQL makes a batch of lapsed leases unknown, marking each owner's
// token (lapsedMark). SKIP LOCKED lets several
// gateway instances sweep at once without waiting on each other, and the
// state guard in the UPDATE makes each expiry happen once.
var expireSQL = `WITH due AS (
	SELECT id FROM idem_operations
	WHERE state = 'executing' AND lease_until < statement_timestamp()
	ORDER BY lease_until LIMIT $1
	FOR UPDATE SKIP LOCKED
), up AS (
	UPDATE idem_operations o SET state = 'unknown', owner_token = ` + lapsedMark + `o.owner_token, lease_until = NULL,
		probe_token = NULL, probe_until = NULL, probe_next = NULL,
		last_error = 'lease_expired', updated_at = statement_timestamp(),
		expires_at = statement_timestamp() + o.retention_us * interval '1 microsecond'
	FROM due WHERE o.id = due.id AND o.state = 'executing'
	RETURNING o.id, o.updated_at, o.tenant, o.key, o.fingerprint, o.route, o.approval_id, o.response_status,
		o.result_ref, ` + eventContext + `
), hist AS (
	` + recorded("up", "'executing'", "'unknown'", "up.updated_at", "$2", "'lease expired'") + ` FROM up
)
SELECT count(*) FROM up`

// purgeSQL deletes a batch of operations past retention, with their
// approvals; their audit events, which are their history, stay.
// Only prepared and final operations qualify: see ledger.Store.Purge.
var purgeSQL = `WITH due AS (
	SELECT id FROM idem_operations
	WHERE state IN ('prepared', 'succeeded', 'failed') AND expires_at < statement_timestamp()
	ORDER BY expires_at LIMIT $1
	FOR UPDATE SKIP LOCKED
), approvals AS (
	DELETE FROM idem_approvals a USING due WHERE a.op_id = due.id
), gone AS (
	DELETE FROM idem_operations o USING due WHERE o.id = due.id
	RETURNING o.id
)
SELECT count(*) FROM gone`

// ExpireLeases implements ledger.Store.
func (s *Store) ExpireLeases(ctx context.Context, limit int) (int, error) {
	return s.sweep(ctx, "expire leases", expireSQL, limit, ledger.ActorLeaseExpiry)
}

// Purge implements ledger.Store.
func (s *Store) Purge(ctx context.Context, limit int) (int, error) {
	ops, err := s.sweep(ctx, "purge", purgeSQL, limit)
	if err != nil {
		return ops, err
	}
	effects, err := s.sweep(ctx, "purge effects", purgeEffectsSQL, limit)
	return ops + effects, err
}

func (s *Store) sweep(ctx context.Context, op, query string, limit int, args ...any) (int, error) {
	if err := steps.BatchLimit(op, limit); err != nil {
		return 0, err
	}
	var n int
	if err := s.pool.QueryRow(ctx, query, append([]any{limit}, args...)...).Scan(&n); err != nil {
		return 0, mapErr(op, err)
	}
	return n, nil
}
