package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/ledger"
)

// auditColumns is the column list of an event, in scanEvent's order.
const auditColumns = `id, coalesce(seq, -1), tenant, at, kind, coalesce(operation_id, ''), coalesce(principal, ''),
	coalesce(run_id, ''), coalesce(trace_id, ''), coalesce(key, ''), coalesce(fingerprint, ''), coalesce(route, ''),
	coalesce(target, ''), coalesce(from_state, ''), coalesce(to_state, ''), coalesce(actor, ''), coalesce(reason, ''),
	coalesce(upstream_status, 0), coalesce(result_ref, ''), coalesce(response_sha256, ''), coalesce(namespace, '')`

func scanEvent(r *sql.Rows) (audit.Event, error) {
	var e audit.Event
	var at int64
	var kind string
	err := r.Scan(&e.ID, &e.Seq, &e.Tenant, &at, &kind, &e.OperationID, &e.Principal, &e.RunID, &e.TraceID,
		&e.Key, &e.Fingerprint, &e.Route, &e.Target, &e.From, &e.To, &e.Actor, &e.Reason, &e.UpstreamStatus,
		&e.ResultRef, &e.ResponseSHA256, &e.Namespace)
	e.At, e.Kind = fromMicro(at), audit.Kind(kind)
	return e, err
}

// events runs an events query on q.
func events(ctx context.Context, q querier, query string, args ...any) ([]audit.Event, error) {
	var out []audit.Event
	err := eachRow(ctx, q, query, args, func(r *sql.Rows) error {
		e, err := scanEvent(r)
		out = append(out, e)
		return err
	})
	return out, err
}

// eachRow runs query on q and calls fn on every row; every error counts.
func eachRow(ctx context.Context, q querier, query string, args []any, fn func(*sql.Rows) error) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	for rows.Next() {
		if err := fn(rows); err != nil {
			return errors.Join(err, rows.Close())
		}
	}
	return errors.Join(rows.Err(), rows.Close())
}

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
	out, err := events(ctx, s.read, query, args...)
	return out, mapErr("audit events", err)
}

// AuditLog implements ledger.Store.
func (s *Store) AuditLog(ctx context.Context, p ledger.LogParams) ([]audit.Event, error) {
	out, err := events(ctx, s.read, `SELECT `+auditColumns+` FROM idem_audit_events
		WHERE tenant = ? AND seq >= ? AND seq IS NOT NULL ORDER BY seq LIMIT ?`, p.Tenant, p.From, p.PageLimit())
	return out, mapErr("audit log", err)
}

// AuditCheckpoints implements ledger.Store.
func (s *Store) AuditCheckpoints(ctx context.Context, tenant string, after int64) ([]audit.Stored, error) {
	query := `SELECT tenant, size, root, signed, at FROM idem_audit_checkpoints WHERE size > ?`
	args := []any{after}
	if tenant != "" {
		query += ` AND tenant = ?`
		args = append(args, tenant)
	}
	var out []audit.Stored
	err := eachRow(ctx, s.read, query+` ORDER BY tenant, size`, args, func(r *sql.Rows) error {
		var c audit.Stored
		var root []byte
		var signed string
		var at int64
		err := r.Scan(&c.Tenant, &c.Size, &root, &signed, &at)
		copy(c.Root[:], root)
		c.Signed, c.At = []byte(signed), fromMicro(at)
		c.Origin = originOf(c.Signed)
		out = append(out, c)
		return err
	})
	return out, mapErr("audit checkpoints", err)
}

// LatestCheckpoint implements ledger.Store.
func (s *Store) LatestCheckpoint(ctx context.Context, tenant string) (*audit.Stored, error) {
	var size int64
	err := queryRow(ctx, s.read, `SELECT checkpoint_size FROM idem_audit_heads WHERE tenant = ? AND checkpoint_size > 0`,
		tenant).Scan(&size)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("checkpoint of %s: %w", tenant, ledger.ErrNotFound)
	}
	if err != nil {
		return nil, mapErr("latest checkpoint", err)
	}
	cps, err := s.AuditCheckpoints(ctx, tenant, size-1)
	if err != nil || len(cps) == 0 {
		return nil, mapErr("latest checkpoint", errors.Join(err, fmt.Errorf("checkpoint %d of %s is missing", size, tenant)))
	}
	return &cps[0], nil
}

// originOf is a signed checkpoint's first line.
func originOf(signed []byte) string {
	for i, b := range signed {
		if b == '\n' {
			return string(signed[:i])
		}
	}
	return ""
}

// AuditHashes implements ledger.Store.
func (s *Store) AuditHashes(ctx context.Context, tenant string, indexes []int64) ([]tlog.Hash, error) {
	out, err := readHashes(ctx, s.read, tenant, indexes)
	return out, mapErr("audit hashes", err)
}

// recordSQL writes one event recorded apart from a transition.
const recordSQL = `INSERT INTO idem_audit_events (tenant, at, kind, operation_id, principal, run_id, trace_id, key,
	fingerprint, route, target, actor, reason, upstream_status, result_ref, response_sha256, namespace)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// RecordEvents implements ledger.Store, as one step of the writer: the
// events ride in the next group commit.
func (s *Store) RecordEvents(ctx context.Context, events []audit.Event) error {
	if err := ledger.ValidateEvents(events); err != nil {
		return err
	}
	_, err := step(s, ctx, owning, func(ctx context.Context, d driver) (struct{}, error) {
		q := d.q.(*writeConn)
		for _, e := range events {
			if _, err := q.ExecContext(ctx, recordSQL, e.Tenant, e.At.UnixMicro(), string(e.Kind), null(e.OperationID),
				null(e.Principal), null(e.RunID), null(e.TraceID), null(e.Key), null(e.Fingerprint), null(e.Route),
				null(e.Target), null(e.Actor), null(e.Reason), nullStatus(e.UpstreamStatus), null(e.ResultRef),
				null(e.ResponseSHA256), eventNamespace(e.Namespace)); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	return mapErr("record events", err)
}

// eventNamespace is how an event's namespace is kept: NULL for the
// clients' (or none), as events of before namespaces have it.
func eventNamespace(ns string) any {
	if ns == audit.ClientsNamespace {
		return nil
	}
	return null(ns)
}

// nullStatus is a status, 0 being none.
func nullStatus(status int) any {
	if status == 0 {
		return nil
	}
	return status
}
