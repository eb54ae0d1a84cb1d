package sqlite

import (
	"context"
	"database/sql"

	"github.com/idemgate/idemgate/ledger"
)

// Get implements ledger.Store.
func (s *Store) Get(ctx context.Context, id string) (*ledger.Operation, error) {
	op, err := scanOp(queryRow(ctx, s.reads, selectByIDSQL, id))
	return op, mapErr("get "+id, err)
}

// GetByKey implements ledger.Store.
func (s *Store) GetByKey(ctx context.Context, k ledger.OpKey) (*ledger.Operation, error) {
	if err := k.Lookup("get by key"); err != nil {
		return nil, err
	}
	op, err := scanOp(queryRow(ctx, s.reads, selectByKeySQL, k.Tenant, k.Namespace, k.Key))
	return op, mapErr("get by key", err)
}

// List implements ledger.Store.
func (s *Store) List(ctx context.Context, p ledger.ListParams) (ledger.Page, error) {
	if err := ledger.Lookup("list", p.Tenant, p.After); err != nil {
		return ledger.Page{}, err // a cursor no id can be, as PostgreSQL answers it
	}
	limit := p.PageLimit()
	query := `SELECT ` + opColumns + ` FROM idem_operations WHERE id > ?`
	args := []any{p.After}
	if p.Tenant != "" {
		query += ` AND tenant = ?`
		args = append(args, p.Tenant)
	}
	if p.State != ledger.None {
		query += ` AND state = ?`
		args = append(args, string(p.State))
	}
	query += ` ORDER BY id LIMIT ?`
	args = append(args, limit+1)
	var ops []*ledger.Operation
	err := s.each(ctx, query, args, func(r *sql.Rows) error {
		op, err := scanOp(r)
		ops = append(ops, op)
		return err
	})
	if err != nil {
		return ledger.Page{}, mapErr("list", err)
	}
	return ledger.NewPage(ops, limit), nil
}

// History implements ledger.Store: the transition events of the
// operation, in the order they were recorded.
func (s *Store) History(ctx context.Context, id string) ([]ledger.Event, error) {
	var events []ledger.Event
	err := s.each(ctx, `SELECT coalesce(from_state, ''), to_state, at, actor, coalesce(reason, '')
		FROM idem_audit_events WHERE operation_id = ? AND to_state IS NOT NULL ORDER BY id`, []any{id},
		func(r *sql.Rows) error {
			e := ledger.Event{Seq: int64(len(events) + 1), OpID: id}
			var at int64
			err := r.Scan(&e.From, &e.To, &at, &e.Actor, &e.Reason)
			e.At = fromMicro(at)
			events = append(events, e)
			return err
		})
	return events, mapErr("history", err)
}

func (s *Store) each(ctx context.Context, query string, args []any, fn func(*sql.Rows) error) error {
	return eachRow(ctx, s.read, query, args, fn)
}

// usageSQL counts a tenant's live operations, its pending approvals, and
// the bytes its operations and approvals hold, by ledger.OperationHeld
// and ledger.ApprovalHeld (256 is ledger.HeldPerRecord); length() reads a
// blob's size from its record header, not its content, and octet_length()
// a text's bytes.
const usageSQL = `SELECT
	(SELECT count(*) FILTER (WHERE state IN ('prepared', 'executing', 'unknown')) FROM idem_operations WHERE tenant = ?1),
	(SELECT count(*) FROM idem_approvals WHERE tenant = ?1 AND status = 'pending'),
	(SELECT coalesce(sum(coalesce(length(response_body), 0) + coalesce(length(response_headers), 0) +
		coalesce(octet_length(probe), 0) + coalesce(octet_length(business_key), 0) +
		coalesce(octet_length(concurrency_key), 0) + coalesce(octet_length(result_ref), 0) +
		(octet_length(key) + octet_length(route) + octet_length(fingerprint) + coalesce(octet_length(target), 0) +
		 coalesce(octet_length(principal), 0) + coalesce(octet_length(run_id), 0) +
		 coalesce(octet_length(trace_id), 0) + 256) * (3 + 2 * attempts)), 0)
	 FROM idem_operations WHERE tenant = ?1) +
	(SELECT coalesce(sum(octet_length(key) + octet_length(route) + octet_length(target) + octet_length(fingerprint) +
		octet_length(summary) + octet_length(command) + octet_length(requested_by) + octet_length(approvers) +
		coalesce(octet_length(decided_by), 0) + octet_length(note) + 256), 0)
	 FROM idem_approvals WHERE tenant = ?1)`

// Usage implements ledger.Store.
func (s *Store) Usage(ctx context.Context, tenant string) (ledger.Usage, error) {
	var u ledger.Usage
	err := queryRow(ctx, s.reads, usageSQL, tenant).Scan(&u.Live, &u.Pending, &u.Stored)
	return u, mapErr("usage", err)
}

// The queries of Stats: operations by tenant and state, pending approvals,
// and the audit heads. The first reads every operation once; the metrics
// read it at most once per scrape interval.
const (
	statsStatesSQL = `SELECT tenant, state, count(*), min(updated_at),
	count(*) FILTER (WHERE state = 'executing' AND lease_until < ` + nowUS + `)
	FROM idem_operations GROUP BY tenant, state`
	statsApprovalsSQL = `SELECT tenant, count(*), min(created_at) FROM idem_approvals
	WHERE status = 'pending' GROUP BY tenant`
	statsCheckpointsSQL = `SELECT tenant, checkpoint_at FROM idem_audit_heads WHERE checkpoint_size > 0`
)

// Stats implements ledger.Store.
func (s *Store) Stats(ctx context.Context) ([]ledger.TenantStats, error) {
	by := ledger.StatsByTenant{}
	err := s.each(ctx, statsStatesSQL, nil, func(r *sql.Rows) error {
		var tenant, state string
		var n, oldest, stuck int64
		if err := r.Scan(&tenant, &state, &n, &oldest, &stuck); err != nil {
			return err
		}
		by.State(tenant, ledger.State(state), n, fromMicro(oldest), stuck)
		return nil
	})
	if err == nil {
		err = s.each(ctx, statsApprovalsSQL, nil, func(r *sql.Rows) error {
			var tenant string
			var n, oldest int64
			err := r.Scan(&tenant, &n, &oldest)
			by.Approvals(tenant, n, fromMicro(oldest))
			return err
		})
	}
	if err == nil {
		err = s.each(ctx, statsCheckpointsSQL, nil, func(r *sql.Rows) error {
			var tenant string
			var at int64
			err := r.Scan(&tenant, &at)
			by.Checkpoint(tenant, fromMicro(at))
			return err
		})
	}
	return by.List(), mapErr("stats", err)
}
