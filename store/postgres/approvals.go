package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/steps"
	"github.com/idemgate/idemgate/ledger"
)

// approvalColumns is the column list of an approval, in scanApproval's order.
const approvalColumns = `id, op_id, tenant, key, route, target, fingerprint, summary, command, reversible,
	requested_by, approvers, status, created_at, expires_at, valid_for_us, decided_by, decided_at, note, headers`

// us turns a parameter of microseconds into an interval.
func us(param string) string { return param + `::bigint * interval '1 microsecond'` }

// reserveApprovalSQL reserves an operation prepared with a pending
// approval, its history row and the approval, in one statement; like
// reserveSQL it returns the key's operation when it inserts nothing.
var reserveApprovalSQL = `WITH ins AS (
	INSERT INTO idem_operations (id, tenant, key, route, fingerprint, state, attempts, fence, business_key,
		concurrency_key, retention_us, created_at, updated_at, expires_at, approval_id, approval_status,
		approval_expires_at, principal, target, run_id, trace_id, probe, namespace, kind, fingerprint_rules)
	VALUES ($1, $2, $3, $4, $5, 'prepared', 0, 0, $6, $7, $8::bigint, statement_timestamp(), statement_timestamp(), statement_timestamp() + ` + us("$8") + `,
		$10, 'pending', statement_timestamp() + ` + us("$11") + `, $19, $20, $21, $22, $23, $25, $26, $27)
	ON CONFLICT DO NOTHING
	RETURNING ` + opColumns + `
), hist AS (
	` + recorded("ins", "NULL::text", "ins.state", "ins.created_at", "$9", "'reserve for approval'") + ` FROM ins
), apr AS (
	INSERT INTO idem_approvals (id, op_id, tenant, key, route, target, fingerprint, summary, command, reversible,
		requested_by, approvers, status, created_at, expires_at, valid_for_us, headers)
	SELECT $10, id, tenant, key, route, $12, fingerprint, $13, $14, $15, $16, $17, 'pending', created_at,
		approval_expires_at, $18::bigint, $24 FROM ins
)
SELECT true, ` + opColumns + `, false FROM ins
UNION ALL
SELECT false, ` + opColumns + `, (state = 'executing' AND lease_until < statement_timestamp())
	FROM idem_operations WHERE tenant = $2 AND namespace = $25 AND key = $3 AND NOT EXISTS (SELECT 1 FROM ins)`

// decideSQL decides a pending approval, guarded by everything a decision
// must match, and reflects it on the operation: granted, the approval's
// clock restarts (valid_for); denied, the operation fails, with its
// history row.
var decideSQL = `WITH ap AS (
	UPDATE idem_approvals SET status = $2, decided_by = $3, decided_at = statement_timestamp(), note = $4,
		expires_at = CASE WHEN $2 = 'approved' THEN statement_timestamp() + valid_for_us * interval '1 microsecond' ELSE expires_at END
	WHERE id = $1 AND tenant = $5 AND fingerprint = $6 AND status = 'pending' AND expires_at >= statement_timestamp()
		AND requested_by <> $3
	RETURNING ` + approvalColumns + `
), up AS (
	UPDATE idem_operations o SET approval_status = ap.status, approval_expires_at = ap.expires_at,
		state = CASE WHEN ap.status = 'denied' THEN 'failed' ELSE o.state END,
		last_error = CASE WHEN ap.status = 'denied' THEN 'approval_denied' ELSE o.last_error END,
		updated_at = CASE WHEN ap.status = 'denied' THEN statement_timestamp() ELSE o.updated_at END,
		expires_at = CASE WHEN ap.status = 'denied' THEN statement_timestamp() + o.retention_us * interval '1 microsecond'
			ELSE o.expires_at END
	FROM ap WHERE o.id = ap.op_id AND o.approval_id = ap.id AND o.state = 'prepared'
	RETURNING o.id, o.state, o.updated_at, o.tenant, o.key, o.fingerprint, o.route, o.approval_id,
		o.response_status, o.result_ref, ` + eventContext + `
), hist AS (
	` + recorded("up", "'prepared'", "up.state", "up.updated_at", "$3", "$7") + ` FROM up WHERE up.state = 'failed'
)
SELECT ` + approvalColumns + `, (SELECT count(*) FROM up) FROM ap`

// reopenSQL gives a prepared operation whose approval lapsed a new one,
// marks the lapsed one expired (a used one stays used) and writes the new
// one, in one statement.
var reopenSQL = `WITH prev AS (
	-- The lapsed approval's row is locked first, as a decision and the
	-- sweep lock it before the operation's: no two of them deadlock.
	SELECT id FROM idem_approvals WHERE id = $2 FOR UPDATE
), up AS (
	UPDATE idem_operations SET approval_id = $3, approval_status = 'pending',
		approval_expires_at = statement_timestamp() + ` + us("$4") + `, updated_at = statement_timestamp()
	WHERE id = $1 AND state = 'prepared' AND approval_id = $2 AND EXISTS (SELECT 1 FROM prev)
		AND (approval_status = 'expired'
		     OR (approval_status IN ('pending', 'approved', 'used') AND approval_expires_at < statement_timestamp()))
	RETURNING ` + opColumnsNoBody + `
), old AS (
	UPDATE idem_approvals SET status = 'expired'
	WHERE id = $2 AND status IN ('pending', 'approved') AND EXISTS (SELECT 1 FROM up)
), ins AS (
	INSERT INTO idem_approvals (id, op_id, tenant, key, route, target, fingerprint, summary, command, reversible,
		requested_by, approvers, status, created_at, expires_at, valid_for_us, headers)
	SELECT $3, id, tenant, key, route, $5, fingerprint, $6, $7, $8, $9, $10, 'pending', updated_at,
		approval_expires_at, $11::bigint, $12 FROM up
)
SELECT ` + opColumns + ` FROM up`

// expireApprovalsSQL expires a batch of approvals past their time and
// frees their operations' concurrency groups; SKIP LOCKED lets instances
// sweep side by side.
const expireApprovalsSQL = `WITH due AS (
	SELECT id FROM idem_approvals
	WHERE status IN ('pending', 'approved') AND expires_at < statement_timestamp()
	ORDER BY expires_at LIMIT $1
	FOR UPDATE SKIP LOCKED
)` + expireDueSQL

// expireOneApprovalSQL expires one approval past its time.
const expireOneApprovalSQL = `WITH due AS (
	SELECT id FROM idem_approvals WHERE id = $1 AND status IN ('pending', 'approved') AND expires_at < statement_timestamp()
	FOR UPDATE
)` + expireDueSQL

// expireDueSQL expires the approvals of the CTE due, and frees their
// operations' concurrency groups.
const expireDueSQL = `, ap AS (
	UPDATE idem_approvals a SET status = 'expired' FROM due
	WHERE a.id = due.id AND a.status IN ('pending', 'approved')
	RETURNING a.id, a.op_id
), up AS (
	UPDATE idem_operations o SET approval_status = 'expired'
	FROM ap WHERE o.id = ap.op_id AND o.approval_id = ap.id AND o.approval_status IN ('pending', 'approved')
)
SELECT count(*) FROM ap`

func (d driver) ExpireApproval(ctx context.Context, id string) (bool, error) {
	var n int64
	err := d.write(ctx, single, false, func(row pgx.Row) error { return row.Scan(&n) }, expireOneApprovalSQL, id)
	return n == 1, mapErr("expire approval", err)
}

// insertForApproval is Insert for a reservation that asks for an approval.
func (d driver) insertForApproval(ctx context.Context, id string, p ledger.ReserveParams) (*ledger.Operation, error) {
	a := p.Approval
	var inserted, lapsed bool
	var op *ledger.Operation
	err := d.write(ctx, single, false, func(row pgx.Row) (err error) {
		op, err = scanOp(scanAround{row, &inserted, &lapsed})
		return err
	}, reserveApprovalSQL, id, p.Tenant, p.Key, p.Route, p.Fingerprint, nullable(p.BusinessKey),
		nullable(p.ConcurrencyKey), micros(p.Retention), p.Actor, a.ID, micros(a.TTL), a.Target, a.Summary,
		string(a.Command), a.Reversible, a.RequestedBy, a.Approvers, micros(a.ValidFor), nullable(p.Principal),
		nullable(p.Target), nullable(p.RunID), nullable(p.TraceID), nullable(p.Probe), steps.HeaderText(a.Headers),
		p.Namespace, string(p.Kind), nullable(p.FingerprintRules))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, steps.ErrGuard
	case err != nil:
		return nil, mapErr("insert", err)
	case !inserted:
		return nil, &steps.KeyTaken{Op: op, Lapsed: lapsed}
	}
	return op, nil
}

func (d driver) GetApproval(ctx context.Context, id string) (*ledger.Approval, error) {
	if err := ledger.Lookup("approval", id); err != nil {
		return nil, err
	}
	a, err := scanApproval(d.read(ctx, selectApprovalSQL, id))
	return a, mapErr("approval "+id, err)
}

func (d driver) Decide(ctx context.Context, dec steps.Decision) (*ledger.Approval, error) {
	var a *ledger.Approval
	var moved int64
	err := d.write(ctx, single, false, func(row pgx.Row) (err error) {
		a, err = scanApproval(scanExtra{row, &moved})
		return err
	}, decideSQL, dec.ID, string(dec.Status), dec.Actor, dec.Note, dec.Tenant, dec.Fingerprint, dec.Reason)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, steps.ErrGuard
	case err != nil:
		return nil, mapErr("decide", err)
	case moved != 1:
		// A pending approval's operation is prepared under it; anything else
		// is a broken record, not a decision to report as made.
		return nil, fmt.Errorf("decide %s: its operation %s was not waiting for it", a.ID, a.OpID)
	}
	return a, nil
}

func (d driver) Reopen(ctx context.Context, p ledger.ReopenParams) (*ledger.Operation, error) {
	r := p.Request
	var op *ledger.Operation
	err := d.write(ctx, single, false, func(row pgx.Row) (err error) {
		op, err = scanOp(row)
		return err
	}, reopenSQL, p.OpID, p.Previous, r.ID, micros(r.TTL), r.Target, r.Summary, string(r.Command), r.Reversible,
		r.RequestedBy, r.Approvers, micros(r.ValidFor), steps.HeaderText(r.Headers))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, steps.ErrGuard
	}
	return op, mapErr("reopen", err)
}

// ExpireApprovals implements ledger.Store.
func (s *Store) ExpireApprovals(ctx context.Context, limit int) (int, error) {
	return s.sweep(ctx, "expire approvals", expireApprovalsSQL, limit)
}

// selectApprovalSQL reads one approval.
const selectApprovalSQL = `SELECT ` + approvalColumns + ` FROM idem_approvals WHERE id = $1`

// GetApproval implements ledger.Store.
func (s *Store) GetApproval(ctx context.Context, id string) (*ledger.Approval, error) {
	return driver{s: s}.GetApproval(ctx, id)
}

// ListApprovals implements ledger.Store.
func (s *Store) ListApprovals(ctx context.Context, p ledger.ApprovalListParams) (ledger.ApprovalPage, error) {
	if err := ledger.Lookup("list approvals", p.Tenant, p.After); err != nil {
		return ledger.ApprovalPage{}, err
	}
	limit := p.PageLimit()
	var where strings.Builder
	args := []any{p.After}
	where.WriteString("id > $1")
	if p.Tenant != "" {
		args = append(args, p.Tenant)
		fmt.Fprintf(&where, " AND tenant = $%d", len(args))
	}
	if p.Status != "" {
		args = append(args, string(p.Status))
		fmt.Fprintf(&where, " AND status = $%d", len(args))
	}
	args = append(args, limit+1)
	rows, err := s.pool.Query(ctx, fmt.Sprintf(`SELECT %s FROM idem_approvals WHERE %s ORDER BY id LIMIT $%d`,
		approvalColumns, where.String(), len(args)), args...)
	if err != nil {
		return ledger.ApprovalPage{}, mapErr("list approvals", err)
	}
	as, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*ledger.Approval, error) { return scanApproval(r) })
	if err != nil {
		return ledger.ApprovalPage{}, mapErr("list approvals", err)
	}
	return ledger.NewApprovalPage(as, limit), nil
}

func scanApproval(row pgx.Row) (*ledger.Approval, error) {
	var (
		a         ledger.Approval
		command   string
		status    string
		validFor  int64
		decidedBy *string
		decidedAt *time.Time
		headers   *string
	)
	err := row.Scan(&a.ID, &a.OpID, &a.Tenant, &a.Key, &a.Route, &a.Target, &a.Fingerprint, &a.Summary, &command,
		&a.Reversible, &a.RequestedBy, &a.Approvers, &status, &a.CreatedAt, &a.ExpiresAt, &validFor, &decidedBy,
		&decidedAt, &a.Note, &headers)
	if err != nil {
		return nil, err
	}
	if a.Headers, err = steps.ParseHeaders(deref(headers)); err != nil {
		return nil, fmt.Errorf("approval %s: %w", a.ID, err)
	}
	a.Command, a.Status, a.ValidFor = []byte(command), ledger.ApprovalStatus(status), time.Duration(validFor)*time.Microsecond
	a.DecidedBy, a.DecidedAt = deref(decidedBy), deref(decidedAt)
	return &a, nil
}
