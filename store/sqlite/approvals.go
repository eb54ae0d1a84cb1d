package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/steps"
	"github.com/idemgate/idemgate/ledger"
)

// approvalColumns is the column list of an approval, in scanApproval's order.
const approvalColumns = `id, op_id, tenant, key, route, target, fingerprint, summary, command, reversible,
	requested_by, approvers, status, created_at, expires_at, valid_for_us, decided_by, decided_at, note, headers`

// reserveApprovalSQL reserves an operation prepared with a pending
// approval; insertApprovalSQL then writes the approval, in the same batch
// transaction. ?8 is the retention and ?11 the approval's ttl, in
// microseconds.
const reserveApprovalSQL = `INSERT INTO idem_operations (id, tenant, key, route, fingerprint, state, attempts,
	fence, business_key, concurrency_key, retention_us, created_at, updated_at, expires_at, last_actor, last_reason,
	approval_id, approval_status, approval_expires_at, principal, target, run_id, trace_id, probe, namespace, kind,
	fingerprint_rules)
VALUES (?1, ?2, ?3, ?4, ?5, 'prepared', 0, 0, ?6, ?7, ?8, ` + nowUS + `, ` + nowUS + `, ` + nowUS + ` + ?8, ?9,
	'reserve for approval', ?10, 'pending', ` + nowUS + ` + ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)
ON CONFLICT DO NOTHING
RETURNING created_at, expires_at`

const insertApprovalSQL = `INSERT INTO idem_approvals (id, op_id, tenant, key, route, target, fingerprint, summary,
	command, reversible, requested_by, approvers, status, created_at, expires_at, valid_for_us, headers)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 'pending', ?13, ?13 + ?14, ?15, ?16)
RETURNING id`

// decideSQL decides a pending approval, guarded by everything a decision
// must match; granting it restarts its clock (valid_for), and the
// idem_approvals_moved trigger reflects it on the operation.
const decideSQL = `UPDATE idem_approvals SET status = ?2, decided_by = ?3, decided_at = ` + nowUS + `, note = ?4,
	expires_at = CASE WHEN ?2 = 'approved' THEN ` + nowUS + ` + valid_for_us ELSE expires_at END
WHERE id = ?1 AND tenant = ?5 AND fingerprint = ?6 AND status = 'pending' AND expires_at >= ` + nowUS + `
	AND requested_by <> ?3
RETURNING ` + approvalColumns

// denyOpSQL fails the operation of a denied approval; the update trigger
// records the transition.
const denyOpSQL = `UPDATE idem_operations SET state = 'failed', approval_status = 'denied',
	last_error = 'approval_denied', updated_at = ` + nowUS + `, expires_at = ` + nowUS + ` + retention_us,
	last_actor = ?3, last_reason = ?4
WHERE id = ?1 AND approval_id = ?2 AND state = 'prepared'
RETURNING id`

// reopenSQL gives a prepared operation whose approval lapsed a new one.
var reopenSQL = `UPDATE idem_operations SET approval_id = ?3, approval_status = 'pending',
	approval_expires_at = ` + nowUS + ` + ?4, updated_at = ` + nowUS + `
WHERE id = ?1 AND state = 'prepared' AND approval_id = ?2
	AND (approval_status = 'expired'
	     OR (approval_status IN ('pending', 'approved', 'used') AND approval_expires_at < ` + nowUS + `))
RETURNING ` + opColumnsNoBody

// expireLapsedSQL marks the lapsed approval expired (a used one stays used).
const expireLapsedSQL = `UPDATE idem_approvals SET status = 'expired' WHERE id = ?1 AND status IN ('pending', 'approved')
	RETURNING id`

// expireApprovalsSQL expires a batch of approvals past their time; the
// idem_approvals_moved trigger frees their operations' concurrency groups.
const expireApprovalsSQL = `UPDATE idem_approvals SET status = 'expired' WHERE id IN (
	SELECT id FROM idem_approvals WHERE status IN ('pending', 'approved') AND expires_at < ` + nowUS + `
	ORDER BY expires_at LIMIT ?1)`

// expireOneSQL expires one approval past its time.
const expireOneApprovalSQL = `UPDATE idem_approvals SET status = 'expired'
	WHERE id = ?1 AND status IN ('pending', 'approved') AND expires_at < ` + nowUS + ` RETURNING id`

func (d driver) ExpireApproval(ctx context.Context, id string) (bool, error) {
	var got string
	err := queryRow(ctx, d.q, expireOneApprovalSQL, id).Scan(&got)
	if errors.Is(err, errNoRows) {
		return false, nil
	}
	return err == nil, mapErr("expire approval", err)
}

// insertApproval writes the approval of an operation just reserved. It
// runs after the operation's insert in the same transaction: any error of
// its own must end the batch, or the operation would stand without it.
func (d driver) insertApproval(ctx context.Context, opID string, p ledger.ReserveParams, created int64) error {
	a := p.Approval
	approvers, err := json.Marshal(a.Approvers)
	if err != nil {
		return fmt.Errorf("insert approval: %v", err)
	}
	var id string
	err = queryRow(ctx, d.q, insertApprovalSQL, a.ID, opID, p.Tenant, p.Key, p.Route, a.Target, p.Fingerprint,
		a.Summary, string(a.Command), a.Reversible, a.RequestedBy, string(approvers), created,
		a.TTL.Microseconds(), a.ValidFor.Microseconds(), steps.HeaderText(a.Headers)).Scan(&id)
	return whole("insert approval", err)
}

// whole is the error of a statement that completes a step already begun
// in the transaction: never a refusal, which would leave the first half
// committed with the batch, but a failure that aborts it.
func whole(op string, err error) error {
	if err == nil {
		return nil
	}
	if err = mapErr(op, err); errors.Is(err, ledger.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%s: half a step: %v", op, err)
}

// insertForApproval is Insert for a reservation that asks for an approval.
func (d driver) insertForApproval(ctx context.Context, id string, p ledger.ReserveParams) (*ledger.Operation, error) {
	var created, expires int64
	err := queryRow(ctx, d.q, reserveApprovalSQL, id, p.Tenant, p.Key, p.Route, p.Fingerprint, null(p.BusinessKey),
		null(p.ConcurrencyKey), p.Retention.Microseconds(), p.Actor, p.Approval.ID,
		p.Approval.TTL.Microseconds(), null(p.Principal), null(p.Target), null(p.RunID),
		null(p.TraceID), null(p.Probe), p.Namespace, string(p.Kind), null(p.FingerprintRules)).Scan(&created, &expires)
	switch {
	case errors.Is(err, errNoRows):
		return nil, steps.ErrGuard
	case err != nil:
		return nil, mapErr("insert", err)
	}
	if err := d.insertApproval(ctx, id, p, created); err != nil {
		return nil, err
	}
	return p.NewOperation(id, fromMicro(created), time.Time{}, fromMicro(expires)), nil
}

func (d driver) GetApproval(ctx context.Context, id string) (*ledger.Approval, error) {
	a, err := scanApproval(queryRow(ctx, d.q, `SELECT `+approvalColumns+` FROM idem_approvals WHERE id = ?`, id))
	return a, mapErr("approval "+id, err)
}

func (d driver) Decide(ctx context.Context, dec steps.Decision) (*ledger.Approval, error) {
	a, err := scanApproval(queryRow(ctx, d.q, decideSQL, dec.ID, string(dec.Status), dec.Actor, dec.Note,
		dec.Tenant, dec.Fingerprint))
	switch {
	case errors.Is(err, errNoRows):
		return nil, steps.ErrGuard
	case err != nil:
		return nil, mapErr("decide", err)
	case dec.Status != ledger.ApprovalDenied:
		return a, nil
	}
	var id string
	err = queryRow(ctx, d.q, denyOpSQL, a.OpID, a.ID, dec.Actor, dec.Reason).Scan(&id)
	return a, whole("deny: fail the operation", err)
}

func (d driver) Reopen(ctx context.Context, p ledger.ReopenParams) (*ledger.Operation, error) {
	op, err := scanOp(queryRow(ctx, d.q, reopenSQL, p.OpID, p.Previous, p.Request.ID, p.Request.TTL.Microseconds()))
	switch {
	case errors.Is(err, errNoRows):
		return nil, steps.ErrGuard
	case err != nil:
		return nil, mapErr("reopen", err)
	}
	var lapsed string
	if err := queryRow(ctx, d.q, expireLapsedSQL, p.Previous).Scan(&lapsed); err != nil && !errors.Is(err, errNoRows) {
		return nil, whole("reopen: expire the lapsed approval", err)
	}
	rp := ledger.ReserveParams{Tenant: op.Tenant, Key: op.Key, Route: op.Route, Fingerprint: op.Fingerprint,
		Approval: &p.Request}
	if err := d.insertApproval(ctx, op.ID, rp, op.UpdatedAt.UnixMicro()); err != nil {
		return nil, err
	}
	return op, nil
}

// ExpireApprovals implements ledger.Store.
func (s *Store) ExpireApprovals(ctx context.Context, limit int) (int, error) {
	return s.batch(ctx, "expire approvals", expireApprovalsSQL, limit)
}

// GetApproval implements ledger.Store.
func (s *Store) GetApproval(ctx context.Context, id string) (*ledger.Approval, error) {
	return steps.GetApproval(ctx, driver{s: s, q: s.reads}, id)
}

// ListApprovals implements ledger.Store.
func (s *Store) ListApprovals(ctx context.Context, p ledger.ApprovalListParams) (ledger.ApprovalPage, error) {
	if err := ledger.Lookup("list approvals", p.Tenant, p.After); err != nil {
		return ledger.ApprovalPage{}, err // a cursor no id can be, as PostgreSQL answers it
	}
	limit := p.PageLimit()
	query := `SELECT ` + approvalColumns + ` FROM idem_approvals WHERE id > ?`
	args := []any{p.After}
	if p.Tenant != "" {
		query += ` AND tenant = ?`
		args = append(args, p.Tenant)
	}
	if p.Status != "" {
		query += ` AND status = ?`
		args = append(args, string(p.Status))
	}
	query += ` ORDER BY id LIMIT ?`
	args = append(args, limit+1)
	var as []*ledger.Approval
	err := s.each(ctx, query, args, func(r *sql.Rows) error {
		a, err := scanApproval(r)
		as = append(as, a)
		return err
	})
	if err != nil {
		return ledger.ApprovalPage{}, mapErr("list approvals", err)
	}
	return ledger.NewApprovalPage(as, limit), nil
}

func scanApproval(r row) (*ledger.Approval, error) {
	var (
		a                          ledger.Approval
		command, approvers, status string
		created, expires, validFor int64
		decidedBy, headers         sql.NullString
		decidedAt                  sql.NullInt64
	)
	err := r.Scan(&a.ID, &a.OpID, &a.Tenant, &a.Key, &a.Route, &a.Target, &a.Fingerprint, &a.Summary, &command,
		&a.Reversible, &a.RequestedBy, &approvers, &status, &created, &expires, &validFor, &decidedBy, &decidedAt, &a.Note,
		&headers)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(approvers), &a.Approvers); err != nil {
		return nil, fmt.Errorf("approval %s: approvers: %w", a.ID, err)
	}
	if a.Headers, err = steps.ParseHeaders(headers.String); err != nil {
		return nil, fmt.Errorf("approval %s: %w", a.ID, err)
	}
	a.Command, a.Status = []byte(command), ledger.ApprovalStatus(status)
	a.CreatedAt, a.ExpiresAt, a.ValidFor = fromMicro(created), fromMicro(expires), time.Duration(validFor)*time.Microsecond
	a.DecidedBy, a.DecidedAt = decidedBy.String, micro(decidedAt)
	return &a, nil
}
