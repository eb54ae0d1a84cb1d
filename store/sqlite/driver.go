package sqlite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/steps"
	"github.com/idemgate/idemgate/ledger"
)

// reserveSQL inserts the operation unless (tenant, key) is taken: the unique
// constraint is the arbiter. The insert trigger writes the history row in
// the same statement.
const reserveSQL = `INSERT INTO idem_operations (id, tenant, key, route, fingerprint, state, attempts, owner_token,
	fence, lease_until, business_key, concurrency_key, retention_us, created_at, updated_at, expires_at,
	last_actor, last_reason)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?7, ?9, ?10, ?11, ?12, ?13, ?13, ?13 + ?12, ?14, ?15)
ON CONFLICT (tenant, key) DO NOTHING`

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
	expireOneSQL = transitionSQL(`owner_token = NULL, lease_until = NULL, last_error = ?7`,
		`AND lease_until < ?4`)
	resolveSQL = transitionSQL(`response_status = ?7, response_headers = ?8, response_body = ?9,
		result_ref = coalesce(?10, result_ref)`, ``)
	denySQL = transitionSQL(`response_status = ?7, response_headers = ?8, response_body = ?9,
		last_error = ?10`, ``)
	heartbeatSQL = `UPDATE idem_operations SET lease_until = ?1 + ?2, updated_at = ?1
		WHERE id = ?3 AND owner_token = ?4 AND fence = ?5 AND state = 'executing'
		RETURNING lease_until`
)

// driver runs the store's statements for package steps. Every statement
// autocommits on the single writer connection.
type driver struct{ s *Store }

var _ steps.Driver = driver{}

func (d driver) Insert(ctx context.Context, id, token string, p ledger.ReserveParams) (*ledger.Operation, error) {
	now := d.s.now()
	state, attempts, reason := p.State(), 0, "reserve"
	var tokenArg, leaseArg any
	if state == ledger.Executing {
		attempts, reason, tokenArg, leaseArg = 1, "reserve with lease", token, now.Add(p.Lease).UnixMicro()
	}
	n, err := d.s.writeExec(ctx, reserveSQL, id, p.Tenant, p.Key, p.Route, p.Fingerprint, string(state), attempts,
		tokenArg, leaseArg, null(p.BusinessKey), null(p.ConcurrencyKey), p.Retention.Microseconds(),
		now.UnixMicro(), p.Actor, reason)
	switch {
	case err != nil:
		return nil, mapErr("insert", err)
	case n == 0:
		return nil, steps.ErrGuard
	}
	return p.NewOperation(id, now, now.Add(p.Lease), now.Add(p.Retention)), nil
}

func (d driver) Existing(ctx context.Context, tenant, key string) (*ledger.Operation, bool, error) {
	op, err := d.s.GetByKey(ctx, tenant, key)
	if err != nil {
		return nil, false, err
	}
	return op, op.State == ledger.Executing && op.LeaseUntil.Before(d.s.now()), nil
}

func (d driver) Apply(ctx context.Context, c steps.Change) (*ledger.Operation, error) {
	query, args, err := changeSQL(c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Step, err)
	}
	args = append([]any{c.ID, string(c.From), string(c.To), d.s.now().UnixMicro(), c.Actor, c.Reason}, args...)
	op, err := scanOp(d.s.writeRow(ctx, query, args...))
	if errors.Is(err, errNoRows) {
		return nil, steps.ErrGuard
	}
	return op, mapErr(string(c.Step), err)
}

// changeSQL picks the statement for a change and its own parameters (?7 on).
func changeSQL(c steps.Change) (string, []any, error) {
	status, headers, body, err := responseArgs(c.Response)
	switch c.Step {
	case ledger.StepComplete:
		return completeSQL, []any{c.Owner.Token, c.Owner.Fence, status, headers, body,
			null(c.ResultRef), null(c.ErrorCode)}, err
	case ledger.StepRelease, ledger.StepMarkUnknown:
		return leaveSQL, []any{c.Owner.Token, c.Owner.Fence, null(c.ErrorCode)}, nil
	case ledger.StepAcquire, ledger.StepResend:
		return acquireSQL, []any{c.NewToken, c.Lease.Microseconds()}, nil
	case ledger.StepExpire:
		return expireOneSQL, []any{c.ErrorCode}, nil
	case ledger.StepResolve:
		return resolveSQL, []any{status, headers, body, null(c.ResultRef)}, err
	case ledger.StepDeny:
		return denySQL, []any{status, headers, body, null(c.ErrorCode)}, err
	}
	return "", nil, fmt.Errorf("no statement for step %s", c.Step)
}

func (d driver) ExtendLease(ctx context.Context, l ledger.Lease, dur time.Duration) (time.Time, error) {
	var until int64
	err := d.s.writeRow(ctx, heartbeatSQL, d.s.now().UnixMicro(), dur.Microseconds(), l.OpID, l.Token, l.Fence).
		Scan(&until)
	if errors.Is(err, errNoRows) {
		return time.Time{}, steps.ErrGuard
	}
	return fromMicro(until), mapErr("heartbeat", err)
}

func (d driver) Get(ctx context.Context, id string) (*ledger.Operation, error) {
	return d.s.Get(ctx, id)
}

// Reserve implements ledger.Store.
func (s *Store) Reserve(ctx context.Context, p ledger.ReserveParams) (ledger.Reservation, error) {
	return steps.Reserve(ctx, driver{s}, p)
}

// Acquire implements ledger.Store.
func (s *Store) Acquire(ctx context.Context, p ledger.AcquireParams) (ledger.Reservation, error) {
	return steps.Acquire(ctx, driver{s}, p)
}

// Heartbeat implements ledger.Store.
func (s *Store) Heartbeat(ctx context.Context, l ledger.Lease, d time.Duration) (ledger.Lease, error) {
	return steps.Heartbeat(ctx, driver{s}, l, d)
}

// Complete implements ledger.Store.
func (s *Store) Complete(ctx context.Context, l ledger.Lease, o ledger.Outcome) (*ledger.Operation, error) {
	return steps.Complete(ctx, driver{s}, l, o)
}

// Release implements ledger.Store.
func (s *Store) Release(ctx context.Context, l ledger.Lease, n ledger.Note) (*ledger.Operation, error) {
	return steps.Release(ctx, driver{s}, l, n)
}

// MarkUnknown implements ledger.Store.
func (s *Store) MarkUnknown(ctx context.Context, l ledger.Lease, n ledger.Note) (*ledger.Operation, error) {
	return steps.MarkUnknown(ctx, driver{s}, l, n)
}

// Resolve implements ledger.Store.
func (s *Store) Resolve(ctx context.Context, p ledger.ResolveParams) (*ledger.Operation, error) {
	return steps.Resolve(ctx, driver{s}, p)
}

// Deny implements ledger.Store.
func (s *Store) Deny(ctx context.Context, p ledger.DenyParams) (*ledger.Operation, error) {
	return steps.Deny(ctx, driver{s}, p)
}
