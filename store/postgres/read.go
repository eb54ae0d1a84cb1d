package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/ledger"
)

// selectByIDSQL reads one operation.
const selectByIDSQL = `SELECT ` + opColumns + ` FROM idem_operations WHERE id = $1`

// Get implements ledger.Store.
func (s *Store) Get(ctx context.Context, id string) (*ledger.Operation, error) {
	return driver{s: s}.Get(ctx, id)
}

// GetByKey implements ledger.Store.
func (s *Store) GetByKey(ctx context.Context, k ledger.OpKey) (*ledger.Operation, error) {
	if err := k.Lookup("get by key"); err != nil {
		return nil, err
	}
	op, err := scanOp(s.pool.QueryRow(ctx, `SELECT `+opColumns+` FROM idem_operations
		WHERE tenant = $1 AND namespace = $2 AND key = $3`, k.Tenant, k.Namespace, k.Key))
	return op, mapErr("get by key", err)
}

// List implements ledger.Store. The query text depends on which filters are
// set, so each variant gets a plan that uses the (tenant, state, id) index.
func (s *Store) List(ctx context.Context, p ledger.ListParams) (ledger.Page, error) {
	if err := ledger.Lookup("list", p.Tenant, p.After); err != nil {
		return ledger.Page{}, err
	}
	limit := p.PageLimit()
	query := `SELECT ` + opColumns + ` FROM idem_operations WHERE id > $1`
	args := []any{p.After}
	if p.Tenant != "" {
		args = append(args, p.Tenant)
		query += fmt.Sprintf(" AND tenant = $%d", len(args))
	}
	if p.State != ledger.None {
		args = append(args, string(p.State))
		query += fmt.Sprintf(" AND state = $%d", len(args))
	}
	args = append(args, limit+1)
	query += fmt.Sprintf(" ORDER BY id LIMIT $%d", len(args))
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return ledger.Page{}, mapErr("list", err)
	}
	ops, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*ledger.Operation, error) { return scanOp(r) })
	if err != nil {
		return ledger.Page{}, mapErr("list", err)
	}
	return ledger.NewPage(ops, limit), nil
}

// History implements ledger.Store: the transition events of the
// operation, in the order they were recorded.
func (s *Store) History(ctx context.Context, id string) ([]ledger.Event, error) {
	if !ledger.Holdable(id) {
		return nil, nil // as for any id it does not hold
	}
	rows, err := s.pool.Query(ctx, `SELECT coalesce(from_state, ''), to_state, at, actor, coalesce(reason, '')
		FROM idem_audit_events WHERE operation_id = $1 AND to_state IS NOT NULL ORDER BY id`, id)
	if err != nil {
		return nil, mapErr("history", err)
	}
	var n int64
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Event, error) {
		n++
		e := ledger.Event{Seq: n, OpID: id}
		err := r.Scan(&e.From, &e.To, &e.At, &e.Actor, &e.Reason)
		return e, err
	})
	return events, mapErr("history", err)
}

// usageSQL counts a tenant's live operations, its pending approvals, and
// the bytes its operations and approvals hold, by ledger.OperationHeld
// and ledger.ApprovalHeld (256 is ledger.HeldPerRecord); octet_length
// reads a value's size without detoasting it.
const usageSQL = `SELECT
	(SELECT count(*) FILTER (WHERE state IN ('prepared', 'executing', 'unknown')) FROM idem_operations WHERE tenant = $1),
	(SELECT count(*) FROM idem_approvals WHERE tenant = $1 AND status = 'pending'),
	(SELECT coalesce(sum(coalesce(octet_length(response_body), 0) + coalesce(octet_length(response_headers), 0) +
		coalesce(octet_length(probe), 0) + coalesce(octet_length(business_key), 0) +
		coalesce(octet_length(concurrency_key), 0) + coalesce(octet_length(result_ref), 0) +
		(octet_length(key) + octet_length(route) + octet_length(fingerprint) + coalesce(octet_length(target), 0) +
		 coalesce(octet_length(principal), 0) + coalesce(octet_length(run_id), 0) +
		 coalesce(octet_length(trace_id), 0) + 256)::bigint * (3 + 2 * attempts)), 0)::bigint
	 FROM idem_operations WHERE tenant = $1) +
	(SELECT coalesce(sum(octet_length(key) + octet_length(route) + octet_length(target) + octet_length(fingerprint) +
		octet_length(summary) + octet_length(command) + octet_length(requested_by) + octet_length(approvers::text) +
		coalesce(octet_length(decided_by), 0) + octet_length(note) + 256), 0)::bigint
	 FROM idem_approvals WHERE tenant = $1)`

// Usage implements ledger.Store.
func (s *Store) Usage(ctx context.Context, tenant string) (ledger.Usage, error) {
	var u ledger.Usage
	err := s.pool.QueryRow(ctx, usageSQL, tenant).Scan(&u.Live, &u.Pending, &u.Stored)
	return u, mapErr("usage", err)
}

// The queries of Stats: operations by tenant and state, pending approvals,
// and the audit heads, in one round trip. The first reads every operation
// once; the metrics read it at most once per scrape interval.
const statsSQL = `SELECT 's', tenant, state, count(*), min(updated_at),
	count(*) FILTER (WHERE state = 'executing' AND lease_until < statement_timestamp())
	FROM idem_operations GROUP BY tenant, state
UNION ALL
SELECT 'a', tenant, '', count(*), min(created_at), 0 FROM idem_approvals WHERE status = 'pending' GROUP BY tenant
UNION ALL
SELECT 'c', tenant, '', 0, checkpoint_at, 0 FROM idem_audit_heads WHERE checkpoint_size > 0`

// Stats implements ledger.Store.
func (s *Store) Stats(ctx context.Context) ([]ledger.TenantStats, error) {
	rows, err := s.pool.Query(ctx, statsSQL)
	if err != nil {
		return nil, mapErr("stats", err)
	}
	by := ledger.StatsByTenant{}
	var kind, tenant, state string
	var n, stuck int64
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&kind, &tenant, &state, &n, &at, &stuck}, func() error {
		switch kind {
		case "s":
			by.State(tenant, ledger.State(state), n, at, stuck)
		case "a":
			by.Approvals(tenant, n, at)
		default:
			by.Checkpoint(tenant, at)
		}
		return nil
	})
	return by.List(), mapErr("stats", err)
}
