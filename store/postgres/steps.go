package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/ledger"
)

// transitionSQL builds the one statement that makes a transition: a
// conditional UPDATE guarded by the source state (and, for owner steps, the
// owner token and fence), and the history row, in one CTE. Parameters $1 to
// $5 are id, from, to, actor and reason; set and guard use $6 onwards. The
// stored response is not read back: it is what the step wrote.
func transitionSQL(set, guard string) string {
	return `WITH up AS (
	UPDATE idem_operations SET state = $3, updated_at = now(),
		expires_at = now() + retention_us * interval '1 microsecond', ` + set + `
	WHERE id = $1 AND state = $2 ` + guard + `
	RETURNING ` + opColumnsNoBody + `
), hist AS (
	INSERT INTO idem_transitions (op_id, from_state, to_state, at, actor, reason)
	SELECT id, $2, $3, updated_at, $4, $5 FROM up
)
SELECT ` + opColumns + ` FROM up`
}

const ownerGuard = `AND owner_token = $6 AND fence = $7`

var (
	completeSQL = transitionSQL(`owner_token = NULL, lease_until = NULL, response_status = $8,
		response_headers = $9, response_body = $10, result_ref = $11, last_error = $12`, ownerGuard)
	leaveSQL = transitionSQL(`owner_token = NULL, lease_until = NULL, last_error = $8`, ownerGuard)
	// acquireSQL counts an attempt and raises the fence: any earlier owner's
	// token and fence stop working at this commit.
	acquireSQL = transitionSQL(`owner_token = $6, fence = fence + 1, attempts = attempts + 1,
		lease_until = now() + $7::bigint * interval '1 microsecond'`, ``)
	expireOneSQL = transitionSQL(`owner_token = NULL, lease_until = NULL, last_error = 'lease_expired'`,
		`AND lease_until < now()`)
	resolveSQL = transitionSQL(`response_status = $6, response_headers = $7, response_body = $8,
		result_ref = coalesce($9, result_ref)`, ``)
	denySQL = transitionSQL(`response_status = $6, response_headers = $7, response_body = $8,
		last_error = 'approval_denied'`, ``)
)

// change is one transition to make.
type change struct {
	step     ledger.Step
	to       ledger.State
	id       string
	actor    string
	reason   string
	lease    *ledger.Lease    // set for owner steps
	response *ledger.Response // what the step stores; nil clears it
	query    string
	args     []any // the step's own parameters, from $6
}

// transition runs a transition statement. When the guard fails it reads the
// operation to say why: not found, a stale owner, or an illegal move.
func (s *Store) transition(ctx context.Context, c change) (*ledger.Operation, error) {
	from, err := ledger.Source(c.step, c.to)
	if err != nil {
		return nil, err
	}
	args := append([]any{c.id, string(from), string(c.to), c.actor, c.reason}, c.args...)
	op, err := scanOp(s.pool.QueryRow(ctx, c.query, args...))
	if err == nil {
		op.Response = c.response
		return op, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, mapErr(string(c.step), err)
	}
	current, err := s.Get(ctx, c.id)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.step, err)
	}
	if c.lease != nil {
		return nil, ledger.OwnerError(c.step, *c.lease, current, c.to)
	}
	if err := ledger.Check(c.step, current.State, c.to); err != nil {
		return nil, fmt.Errorf("%s %s: %w", c.step, c.id, err)
	}
	return nil, fmt.Errorf("%s %s: %w: changed concurrently", c.step, c.id, ledger.ErrIllegalTransition)
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
		reason: p.Reason, query: acquireSQL, args: []any{token, micros(p.Lease)}})
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
	var until time.Time
	err := s.pool.QueryRow(ctx, `UPDATE idem_operations
		SET lease_until = now() + $4::bigint * interval '1 microsecond', updated_at = now()
		WHERE id = $1 AND owner_token = $2 AND fence = $3 AND state = 'executing'
		RETURNING lease_until`, l.OpID, l.Token, l.Fence, micros(d)).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		current, err := s.Get(ctx, l.OpID)
		if err != nil {
			return l, fmt.Errorf("heartbeat: %w", err)
		}
		return l, ledger.OwnerError("heartbeat", l, current, ledger.Executing)
	}
	if err != nil {
		return l, mapErr("heartbeat", err)
	}
	l.Until = until
	return l, nil
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
		reason: o.Reason, lease: &l, response: o.Response, query: completeSQL,
		args: []any{l.Token, l.Fence, status, headers, body, nullable(o.ResultRef), nullable(o.ErrorCode)}})
}

// Release implements ledger.Store.
func (s *Store) Release(ctx context.Context, l ledger.Lease, n ledger.Note) (*ledger.Operation, error) {
	return s.transition(ctx, change{step: ledger.StepRelease, to: ledger.Prepared, id: l.OpID, actor: l.Actor,
		reason: n.Reason, lease: &l, query: leaveSQL, args: []any{l.Token, l.Fence, nullable(n.ErrorCode)}})
}

// MarkUnknown implements ledger.Store.
func (s *Store) MarkUnknown(ctx context.Context, l ledger.Lease, n ledger.Note) (*ledger.Operation, error) {
	return s.transition(ctx, change{step: ledger.StepMarkUnknown, to: ledger.Unknown, id: l.OpID, actor: l.Actor,
		reason: n.Reason, lease: &l, query: leaveSQL, args: []any{l.Token, l.Fence, nullable(n.ErrorCode)}})
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
		response: p.Response, query: resolveSQL, args: []any{status, headers, body, nullable(p.ResultRef)}})
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
	return s.transition(ctx, change{step: ledger.StepDeny, to: ledger.Failed, id: p.ID, actor: p.Actor,
		reason: p.Reason, response: p.Response, query: denySQL, args: []any{status, headers, body}})
}
