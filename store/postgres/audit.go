package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/ledger"
)

// auditColumns is the column list of an event, in scanEvent's order.
const auditColumns = `id, coalesce(seq, -1), tenant, at, kind, coalesce(operation_id, ''), coalesce(principal, ''),
	coalesce(run_id, ''), coalesce(trace_id, ''), coalesce(key, ''), coalesce(fingerprint, ''), coalesce(route, ''),
	coalesce(target, ''), coalesce(from_state, ''), coalesce(to_state, ''), coalesce(actor, ''), coalesce(reason, ''),
	coalesce(upstream_status, 0), coalesce(result_ref, ''), coalesce(response_sha256, ''), coalesce(namespace, '')`

// scanEvent reads one row of auditColumns.
func scanEvent(r pgx.CollectableRow) (audit.Event, error) {
	var e audit.Event
	var kind string
	err := r.Scan(&e.ID, &e.Seq, &e.Tenant, &e.At, &kind, &e.OperationID, &e.Principal, &e.RunID, &e.TraceID,
		&e.Key, &e.Fingerprint, &e.Route, &e.Target, &e.From, &e.To, &e.Actor, &e.Reason, &e.UpstreamStatus,
		&e.ResultRef, &e.ResponseSHA256, &e.Namespace)
	e.Kind = audit.Kind(kind)
	return e, err
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// events runs an events query on q.
func events(ctx context.Context, q querier, query string, args ...any) ([]audit.Event, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanEvent)
}

// AuditEvents implements ledger.Store.
func (s *Store) AuditEvents(ctx context.Context, p ledger.AuditParams) ([]audit.Event, error) {
	if !ledger.Holdable(p.Tenant, p.OperationID) {
		return nil, nil // as for any operation it does not hold
	}
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
	out, err := events(ctx, s.pool, query, args...)
	return out, mapErr("audit events", err)
}

// AuditLog implements ledger.Store.
func (s *Store) AuditLog(ctx context.Context, p ledger.LogParams) ([]audit.Event, error) {
	out, err := events(ctx, s.pool, `SELECT `+auditColumns+` FROM idem_audit_events
		WHERE tenant = $1 AND seq >= $2 ORDER BY seq LIMIT $3`, p.Tenant, p.From, p.PageLimit())
	return out, mapErr("audit log", err)
}

// AuditCheckpoints implements ledger.Store.
func (s *Store) AuditCheckpoints(ctx context.Context, tenant string, after int64) ([]audit.Stored, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant, size, root, signed, at FROM idem_audit_checkpoints
		WHERE size > $1 AND ($2 = '' OR tenant = $2) ORDER BY tenant, size`, after, tenant)
	if err != nil {
		return nil, mapErr("audit checkpoints", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (audit.Stored, error) {
		var c audit.Stored
		var root []byte
		var signed string
		err := r.Scan(&c.Tenant, &c.Size, &root, &signed, &c.At)
		copy(c.Root[:], root)
		c.Signed = []byte(signed)
		c.Origin, _, _ = strings.Cut(signed, "\n")
		return c, err
	})
	return out, mapErr("audit checkpoints", err)
}

// LatestCheckpoint implements ledger.Store.
func (s *Store) LatestCheckpoint(ctx context.Context, tenant string) (*audit.Stored, error) {
	var size int64
	err := s.pool.QueryRow(ctx, `SELECT checkpoint_size FROM idem_audit_heads WHERE tenant = $1 AND checkpoint_size > 0`,
		tenant).Scan(&size)
	if errors.Is(err, pgx.ErrNoRows) {
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

// AuditHashes implements ledger.Store.
func (s *Store) AuditHashes(ctx context.Context, tenant string, indexes []int64) ([]tlog.Hash, error) {
	out, err := readHashes(ctx, s.pool, tenant, indexes)
	return out, mapErr("audit hashes", err)
}

// recordSQL writes events recorded apart from a transition, in one
// statement over arrays.
const recordSQL = `INSERT INTO idem_audit_events (tenant, at, kind, operation_id, principal, run_id, trace_id, key,
	fingerprint, route, target, actor, reason, upstream_status, result_ref, response_sha256, namespace)
SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
	$8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::integer[], $15::text[], $16::text[],
	$17::text[])`

// RecordEvents implements ledger.Store.
func (s *Store) RecordEvents(ctx context.Context, events []audit.Event) error {
	if err := ledger.ValidateEvents(events); err != nil {
		return err
	}
	cols := make([][]*string, 13)
	at, status := make([]time.Time, len(events)), make([]*int32, len(events))
	for i, e := range events {
		at[i] = e.At
		if e.UpstreamStatus != 0 {
			st := int32(e.UpstreamStatus)
			status[i] = &st
		}
		for j, v := range []string{e.Tenant, string(e.Kind), e.OperationID, e.Principal, e.RunID, e.TraceID, e.Key,
			e.Fingerprint, e.Route, e.Target, e.Actor, e.Reason, e.ResultRef} {
			cols[j] = append(cols[j], nullable(v))
		}
	}
	sums, namespaces := make([]*string, len(events)), make([]*string, len(events))
	for i, e := range events {
		sums[i] = nullable(e.ResponseSHA256)
		if e.Namespace != audit.ClientsNamespace { // kept as NULL, as before namespaces
			namespaces[i] = nullable(e.Namespace)
		}
	}
	_, err := s.pool.Exec(ctx, recordSQL, cols[0], at, cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], cols[7],
		cols[8], cols[9], cols[10], cols[11], status, cols[12], sums, namespaces)
	return mapErr("record events", err)
}
