package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/idemgate/idemgate/ledger"
)

// ExpireLeases implements ledger.Store. The write lock serializes sweepers,
// in this process or another, so each lapsed lease is expired once.
func (s *Store) ExpireLeases(ctx context.Context, limit int) (n int, err error) {
	if limit <= 0 {
		return 0, fmt.Errorf("expire leases: %w: limit must be positive", ledger.ErrInvalid)
	}
	err = s.tx(ctx, "expire leases", func(tx *sql.Tx) error {
		now := s.now().UnixMicro()
		ids, err := queryIDs(ctx, tx, `UPDATE idem_operations SET state = 'unknown', owner_token = NULL,
			lease_until = NULL, last_error = 'lease_expired', updated_at = ?1, expires_at = ?1 + retention_us
			WHERE id IN (SELECT id FROM idem_operations WHERE state = 'executing' AND lease_until < ?1
				ORDER BY lease_until LIMIT ?2)
			RETURNING id`, now, limit)
		if err != nil {
			return mapErr("expire leases", err)
		}
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, historySQL, id, string(ledger.Executing), string(ledger.Unknown), now,
				ledger.ActorLeaseExpiry, "lease expired"); err != nil {
				return mapErr("expire leases: history", err)
			}
		}
		n = len(ids)
		return nil
	})
	return n, err
}

// Purge implements ledger.Store: prepared and final operations past their
// retention go, with their history.
func (s *Store) Purge(ctx context.Context, limit int) (n int, err error) {
	if limit <= 0 {
		return 0, fmt.Errorf("purge: %w: limit must be positive", ledger.ErrInvalid)
	}
	err = s.tx(ctx, "purge", func(tx *sql.Tx) error {
		ids, err := queryIDs(ctx, tx, `DELETE FROM idem_operations WHERE id IN (
				SELECT id FROM idem_operations
				WHERE state IN ('prepared', 'succeeded', 'failed') AND expires_at < ?1
				ORDER BY expires_at LIMIT ?2)
			RETURNING id`, s.now().UnixMicro(), limit)
		if err != nil {
			return mapErr("purge", err)
		}
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, `DELETE FROM idem_transitions WHERE op_id = ?`, id); err != nil {
				return mapErr("purge: history", err)
			}
		}
		n = len(ids)
		return nil
	})
	return n, err
}

func queryIDs(ctx context.Context, tx *sql.Tx, query string, args ...any) ([]string, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
