package sqlite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// transitionSQL builds the conditional UPDATE that makes a transition,
// guarded by the source state (and, for owner steps, the owner token and
// fence); a trigger writes the history row from last_actor and last_reason.
// Parameters ?1 to ?6 are id, from, to, now, actor and reason; set and guard
// use ?7 onwards. The stored response is not read back: it is what the step
// wrote.
func transitionSQL(set, guard string) string {
	return `UPDATE idem_operations SET state = ?3, updated_at = ?4, expires_at = ?4 + retention_us,
		last_actor = ?5, last_reason = ?6, ` + set + `
	WHERE id = ?1 AND state = ?2 ` + guard + `
	RETURNING ` + opColumnsNoBody
}

const ownerGuard = `AND owner_token = ?7 AND fence = ?8`

var (
	completeSQL = transitionSQL(`owner_token = NULL, lease_until = NULL, response_status = ?9,
		response_headers = ?10, response_body = ?11, result_ref = ?12, last_error = ?13`, ownerGuard)
	leaveSQL = transitionSQL(`owner_token = NULL, lease_until = NULL, last_error = ?9`, ownerGuard)
	// acquireSQL counts an attempt and raises the fence: any earlier owner's
	// token and fence stop working at this commit.
	acquireSQL = transitionSQL(`owner_token = ?7, fence = fence + 1, attempts = attempts + 1,
		lease_until = ?4 + ?8`, ``)
	expireOneSQL = transitionSQL(`owner_token = NULL, lease_until = NULL, last_error = 'lease_expired'`,
		`AND lease_until < ?4`)
	resolveSQL = transitionSQL(`response_status = ?7, response_headers = ?8, response_body = ?9,
		result_ref = coalesce(?10, result_ref)`, ``)
	denySQL = transitionSQL(`response_status = ?7, response_headers = ?8, response_body = ?9,
		last_error = 'approval_denied'`, ``)
	heartbeatSQL = `UPDATE idem_operations SET lease_until = ?1 + ?2, updated_at = ?1
		WHERE id = ?3 AND owner_token = ?4 AND fence = ?5 AND state = 'executing'
		RETURNING lease_until`
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
	args     []any // the step's own parameters, from ?7
}

// transition makes c in one statement. When the guard fails it reads the
// operation to say why: not found, a stale owner, or an illegal move.
func (s *Store) transition(ctx context.Context, c change) (*ledger.Operation, error) {
	from, err := ledger.Source(c.step, c.to)
	if err != nil {
		return nil, err
	}
	args := append([]any{c.id, string(from), string(c.to), s.now().UnixMicro(), c.actor, c.reason}, c.args...)
	op, err := scanOp(s.writeRow(ctx, c.query, args...))
	if err == nil {
		op.Response = c.response
		return op, nil
	}
	if !errors.Is(err, errNoRows) {
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
	var until int64
	err := s.writeRow(ctx, heartbeatSQL, s.now().UnixMicro(), d.Microseconds(), l.OpID, l.Token, l.Fence).Scan(&until)
	if errors.Is(err, errNoRows) {
		current, err := s.Get(ctx, l.OpID)
		if err != nil {
			return l, fmt.Errorf("heartbeat: %w", err)
		}
		return l, ledger.OwnerError("heartbeat", l, current, ledger.Executing)
	}
	if err != nil {
		return l, mapErr("heartbeat", err)
	}
	l.Until = fromMicro(until)
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
		response: p.Response, query: resolveSQL, args: []any{status, headers, body, null(p.ResultRef)}})
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
		response: p.Response, query: denySQL, args: []any{status, headers, body}})
}
