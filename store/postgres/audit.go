package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/ledger"
)

// auditColumns is the column list of an event, in scanEvent's order.
const auditColumns = `id, coalesce(seq, -1), tenant, at, kind, coalesce(operation_id, ''), coalesce(principal, ''),
	coalesce(run_id, ''), coalesce(trace_id, ''), coalesce(key, ''), coalesce(fingerprint, ''), coalesce(route, ''),
	coalesce(target, ''), coalesce(from_state, ''), coalesce(to_state, ''), coalesce(actor, ''), coalesce(reason, ''),
	coalesce(upstream_status, 0), coalesce(result_ref, ''), coalesce(response_sha256, '')`

// AuditEvents implements ledger.Store.
func (s *Store) AuditEvents(ctx context.Context, p ledger.AuditParams) ([]audit.Event, error) {
	query := `SELECT ` + auditColumns + ` FROM idem_audit_events WHERE id > $1`
	args := []any{p.After}
	if p.Tenant != "" {
		args = append(args, p.Tenant)
		query += fmt.Sprintf(" AND tenant = $%d", len(args))
	}
	if p.OperationID != "" {
		args = append(args, p.OperationID)
		query += fmt.Sprintf(" AND operation_id = $%d", len(args))
	}
	args = append(args, p.PageLimit())
	query += fmt.Sprintf(" ORDER BY id LIMIT $%d", len(args))
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, mapErr("audit events", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (audit.Event, error) {
		var e audit.Event
		var kind string
		err := r.Scan(&e.ID, &e.Seq, &e.Tenant, &e.At, &kind, &e.OperationID, &e.Principal, &e.RunID, &e.TraceID,
			&e.Key, &e.Fingerprint, &e.Route, &e.Target, &e.From, &e.To, &e.Actor, &e.Reason, &e.UpstreamStatus,
			&e.ResultRef, &e.ResponseSHA256)
		e.Kind = audit.Kind(kind)
		return e, err
	})
	return out, mapErr("audit events", err)
}
