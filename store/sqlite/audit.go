package sqlite

import (
	"context"
	"database/sql"

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
	query := `SELECT ` + auditColumns + ` FROM idem_audit_events WHERE id > ?`
	args := []any{p.After}
	if p.Tenant != "" {
		query += ` AND tenant = ?`
		args = append(args, p.Tenant)
	}
	if p.OperationID != "" {
		query += ` AND operation_id = ?`
		args = append(args, p.OperationID)
	}
	query += ` ORDER BY id LIMIT ?`
	args = append(args, p.PageLimit())
	var out []audit.Event
	err := s.each(ctx, query, args, func(r *sql.Rows) error {
		var e audit.Event
		var at int64
		var kind string
		err := r.Scan(&e.ID, &e.Seq, &e.Tenant, &at, &kind, &e.OperationID, &e.Principal, &e.RunID, &e.TraceID,
			&e.Key, &e.Fingerprint, &e.Route, &e.Target, &e.From, &e.To, &e.Actor, &e.Reason, &e.UpstreamStatus,
			&e.ResultRef, &e.ResponseSHA256)
		e.At, e.Kind = fromMicro(at), audit.Kind(kind)
		out = append(out, e)
		return err
	})
	return out, mapErr("audit events", err)
}
