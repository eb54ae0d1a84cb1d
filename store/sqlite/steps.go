package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// transitionSQL builds the conditional UPDATE that makes a transition,
// guarded by the source state (and, for owner steps, the owner token and
// fence). Parameters ?1 to ?4 are id, from, to and now; set and guard use ?5
// onwards.
func transitionSQL(set, guard string) string {
	return `UPDATE idem_operations SET state = ?3, updated_at = ?4, expires_at = ?4 + retention_us, ` + set + `
	WHERE id = ?1 AND state = ?2 ` + guard + `
	RETURNING ` + opColumns
}

const ownerGuard = `AND owner_token = ?5 AND fence = ?6`

var (
	completeSQL = transitionSQL(`owner_token = NULL, lease_until = NULL, response_status = ?7,
		response_headers = ?8, response_body = ?9, result_ref = ?10, last_error = ?11`, ownerGuard)
	leaveSQL = transitionSQL(`owner_token = NULL, lease_until = NULL, last_error = ?7`, ownerGuard)
	// acquireSQL counts an attempt and raises the fence: any earlier owner's
	// token and fence stop working at this commit.
	acquireSQL = transitionSQL(`owner_token = ?5, fence = fence + 1, attempts = attempts + 1,
		lease_until = ?4 + ?6`, ``)
	expireOneSQL = transitionSQL(`owner_token = NULL, lease_until = NULL, last_error = 'lease_expired'`,
		`AND lease_until < ?4`)
	resolveSQL = transitionSQL(`response_status = ?5, response_headers = ?6, response_body = ?7,
		result_ref = coalesce(?8, result_ref)`, ``)
	denySQL = transitionSQL(`response_status = ?5, response_headers = ?6, response_body = ?7,
		last_error = 'approval_denied'`, ``)
)

const historySQL = `INSERT INTO idem_transitions (op_id, from_state, to_state, at, actor, reason) VALUES (?, ?, ?, ?, ?, ?)`

// change is one transition to make.
type change struct {
	step   ledger.Step
	to     ledger.State
	id     string
	actor  string
	reason string
	lease  *ledger.Lease // set for owner steps
	query  string
	args   []any // the step's own parameters, from ?5
}

// transition makes c in its own transaction.
func (s *Store) transition(ctx context.Context, c change) (op *ledger.Operation, err error) {
	err = s.tx(ctx, string(c.step), func(tx *sql.Tx) error {
		op, err = s.transitionTx(ctx, tx, c)
		return err
	})
	return op, err
}

// transitionTx runs the guarded update and writes the history row. When the
// guard fails it reads the operation to say why: not found, a stale owner, or
// an illegal move.
func (s *Store) transitionTx(ctx context.Context, tx *sql.Tx, c change) (*ledger.Operation, error) {
	from, err := ledger.Source(c.step, c.to)
	if err != nil {
		return nil, err
	}
	now := s.now()
	args := append([]any{c.id, string(from), string(c.to), now.UnixMicro()}, c.args...)
	op, err := scanOp(tx.QueryRowContext(ctx, c.query, args...))
	if err == nil {
		_, err = tx.ExecContext(ctx, historySQL, c.id, string(from), string(c.to), now.UnixMicro(), c.actor, c.reason)
		return op, mapErr(string(c.step)+": history", err)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, mapErr(string(c.step), err)
	}
	current, err := scanOp(tx.QueryRowContext(ctx, `SELECT `+opColumns+` FROM idem_operations WHERE id = ?`, c.id))
	if err != nil {
		return nil, mapErr(fmt.Sprintf("%s %s", c.step, c.id), err)
	}
	if c.lease != nil {
		return nil, ledger.OwnerError(c.step, *c.lease, current, c.to)
	}
	if err := ledger.Check(c.step, current.State, c.to); err != nil {
		return nil, fmt.Errorf("%s %s: %w", c.step, c.id, err)
	}
	return nil, fmt.Errorf("%s %s: %w: lease still running", c.step, c.id, ledger.ErrIllegalTransition)
}

// Acquire implements ledger.Store.
func (s *Store) Acquire(ctx context.Context, p ledger.AcquireParams) (ledger.Reservation, error) {
	if err := p.Validate(); err != nil {
		return ledger.Reservation{}, err
	}
	step := ledger.StepAcquire
	if p.Resend {
		step = ledger.StepResend
	}
	token := ledger.NewToken()
	op, err := s.transition(ctx, change{step: step, to: ledger.Executing, id: p.ID, actor: p.Actor,
		reason: p.Reason, query: acquireSQL, args: []any{token, p.Lease.Microseconds()}})
	if err != nil {
		return ledger.Reservation{}, err
	}
	return ledger.Reservation{Op: op, Lease: &ledger.Lease{OpID: op.ID, Token: token, Fence: op.Fence,
		Until: op.LeaseUntil, Actor: p.Actor}}, nil
}

// Heartbeat implements ledger.Store.
func (s *Store) Heartbeat(ctx context.Context, l ledger.Lease, d time.Duration) (ledger.Lease, error) {
	if d <= 0 {
		return l, fmt.Errorf("heartbeat: %w: lease must be positive", ledger.ErrInvalid)
	}
	err := s.tx(ctx, "heartbeat", func(tx *sql.Tx) error {
		now := s.now().UnixMicro()
		var until int64
		err := tx.QueryRowContext(ctx, `UPDATE idem_operations SET lease_until = ?1 + ?2, updated_at = ?1
			WHERE id = ?3 AND owner_token = ?4 AND fence = ?5 AND state = 'executing'
			RETURNING lease_until`, now, d.Microseconds(), l.OpID, l.Token, l.Fence).Scan(&until)
		if errors.Is(err, sql.ErrNoRows) {
			current, err := scanOp(tx.QueryRowContext(ctx, `SELECT `+opColumns+` FROM idem_operations WHERE id = ?`, l.OpID))
			if err != nil {
				return mapErr("heartbeat", err)
			}
			return ledger.OwnerError("heartbeat", l, current, ledger.Executing)
		}
		l.Until = fromMicro(until)
		return mapErr("heartbeat", err)
	})
	return l, err
}

// Complete implements ledger.Store.
func (s *Store) Complete(ctx context.Context, l ledger.Lease, o ledger.Outcome) (*ledger.Operation, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	status, headers, body, err := responseArgs(o.Response)
	if err != nil {
		return nil, fmt.Errorf("complete: %w", err)
	}
	return s.transition(ctx, change{step: ledger.StepComplete, to: o.State, id: l.OpID, actor: l.Actor,
		reason: o.Reason, lease: &l, query: completeSQL,
		args: []any{l.Token, l.Fence, status, headers, body, null(o.ResultRef), null(o.ErrorCode)}})
}

// Release implements ledger.Store.
func (s *Store) Release(ctx context.Context, l ledger.Lease, n ledger.Note) (*ledger.Operation, error) {
	return s.transition(ctx, change{step: ledger.StepRelease, to: ledger.Prepared, id: l.OpID, actor: l.Actor,
		reason: n.Reason, lease: &l, query: leaveSQL, args: []any{l.Token, l.Fence, null(n.ErrorCode)}})
}

// MarkUnknown implements ledger.Store.
func (s *Store) MarkUnknown(ctx context.Context, l ledger.Lease, n ledger.Note) (*ledger.Operation, error) {
	return s.transition(ctx, change{step: ledger.StepMarkUnknown, to: ledger.Unknown, id: l.OpID, actor: l.Actor,
		reason: n.Reason, lease: &l, query: leaveSQL, args: []any{l.Token, l.Fence, null(n.ErrorCode)}})
}

// Resolve implements ledger.Store.
func (s *Store) Resolve(ctx context.Context, p ledger.ResolveParams) (*ledger.Operation, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	status, headers, body, err := responseArgs(p.Response)
	if err != nil {
		return nil, fmt.Errorf("resolve: %w", err)
	}
	return s.transition(ctx, change{step: ledger.StepResolve, to: p.To, id: p.ID, actor: p.Actor, reason: p.Note,
		query: resolveSQL, args: []any{status, headers, body, null(p.ResultRef)}})
}

// Deny implements ledger.Store.
func (s *Store) Deny(ctx context.Context, p ledger.DenyParams) (*ledger.Operation, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	status, headers, body, err := responseArgs(p.Response)
	if err != nil {
		return nil, fmt.Errorf("deny: %w", err)
	}
	return s.transition(ctx, change{step: ledger.StepDeny, to: ledger.Failed, id: p.ID, actor: p.Actor, reason: p.Reason,
		query: denySQL, args: []any{status, headers, body}})
}
