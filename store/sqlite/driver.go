package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/steps"
	"github.com/idemgate/idemgate/ledger"
)

// nowUS is the store's clock, in Unix microseconds, read inside each
// statement: after the write lock is taken (another process may hold it for
// a while), and the same for every use within the statement. SQLite's clock
// has millisecond resolution.
const nowUS = `CAST(unixepoch('subsec') * 1000000 AS INTEGER)`

// reserveSQL inserts the operation unless (tenant, namespace, key), its business key
// or its concurrency key is taken: the unique constraints are the arbiters. The insert trigger writes the history row in
// the same statement. ?9 is the lease in microseconds (0: reserve only) and
// ?12 the retention.
const reserveSQL = `INSERT INTO idem_operations (id, tenant, key, route, fingerprint, state, attempts, owner_token,
	fence, lease_until, business_key, concurrency_key, retention_us, created_at, updated_at, expires_at,
	last_actor, last_reason, principal, target, run_id, trace_id, probe, namespace, kind, fingerprint_rules)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?7, CASE WHEN ?9 > 0 THEN ` + nowUS + ` + ?9 END, ?10, ?11, ?12,
	` + nowUS + `, ` + nowUS + `, ` + nowUS + ` + ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)
ON CONFLICT DO NOTHING
RETURNING created_at, lease_until, expires_at`

// existingSQL reads the operation that holds a key, and whether its lease has
// lapsed by the store's clock.
const existingSQL = `SELECT ` + opColumns + `, (state = 'executing' AND lease_until < ` + nowUS + `)
	FROM idem_operations WHERE tenant = ? AND namespace = ? AND key = ?`

// transitionSQL builds the conditional UPDATE that makes a transition,
// guarded by the source state (and, for owner steps, the owner token and
// fence); a trigger writes the history row from last_actor and last_reason.
// Parameters ?1 to ?5 are id, from, to, actor and reason; set and guard use
// ?6 onwards. The stored response is not read back: it is what the step
// wrote.
func transitionSQL(set, guard string) string {
	// Every transition ends any probe's claim: a claim made in one unknown
	// episode must never decide a later one.
	return `UPDATE idem_operations SET state = ?3, updated_at = ` + nowUS + `,
		probe_token = NULL, probe_until = NULL, probe_next = NULL,
		expires_at = ` + nowUS + ` + retention_us, last_actor = ?4, last_reason = ?5, ` + set + `
	WHERE id = ?1 AND state = ?2 ` + guard + `
	RETURNING ` + opColumnsNoBody
}

const ownerGuard = `AND owner_token = ?6 AND fence = ?7`

// lapsedMark prefixes the token of an owner whose lease the expiry took:
// no owner step matches it any more, except that owner's completion after
// the lapse (ledger.StepCompleteLapsed).
const lapsedMark = `'lapsed:' || `

// runContext records a new sender's agent run and trace (?8, ?9) on the
// operation, for the events of its steps; none keeps the earlier ones.
const runContext = `run_id = coalesce(?8, run_id), trace_id = coalesce(?9, trace_id)`

var (
	// Owner steps keep the owner token, so that an owner whose reply was
	// lost can retry its step and be told it happened (see steps.Make).
	completeSQL = transitionSQL(`lease_until = NULL, response_status = ?8,
		response_headers = ?9, response_body = ?10, result_ref = ?11, last_error = ?12, response_sha256 = ?13`, ownerGuard)
	// completeLapsedSQL is completeSQL for an operation the expiry took
	// from this owner (its token, marked by the expiry, and its fence):
	// nobody has moved it since. The token is restored, so that a retry
	// whose reply was lost is recognised (steps.Make).
	completeLapsedSQL = transitionSQL(`owner_token = ?6, lease_until = NULL, response_status = ?8,
		response_headers = ?9, response_body = ?10, result_ref = ?11, last_error = ?12, response_sha256 = ?13`,
		`AND owner_token = `+lapsedMark+`?6 AND fence = ?7`)
	leaveSQL = transitionSQL(`lease_until = NULL, last_error = ?8`, ownerGuard)
	// resendSQL counts an attempt and raises the fence: any earlier owner's
	// token and fence stop working at this commit.
	resendSQL = transitionSQL(`owner_token = ?6, fence = fence + 1, attempts = attempts + 1,
		lease_until = `+nowUS+` + ?7, `+runContext, ``)
	// acquireSQL is resendSQL for a prepared operation: one bound to an
	// approval is taken only while the approval is granted and in time,
	// and it is used by this step (a trigger marks the approval used).
	acquireSQL = transitionSQL(`owner_token = ?6, fence = fence + 1, attempts = attempts + 1,
		lease_until = `+nowUS+` + ?7, approval_status = CASE WHEN approval_id IS NULL THEN NULL ELSE 'used' END,
		`+runContext,
		`AND (approval_id IS NULL OR (approval_status IN ('approved', 'used') AND approval_expires_at >= `+nowUS+`))`)
	expireOneSQL = transitionSQL(`owner_token = `+lapsedMark+`owner_token, lease_until = NULL, last_error = ?6`,
		`AND lease_until < `+nowUS)
	resolveSQL = transitionSQL(`response_status = ?6, response_headers = ?7, response_body = ?8,
		result_ref = coalesce(?9, result_ref), response_sha256 = ?10`, ``)
	denySQL = transitionSQL(`response_status = ?6, response_headers = ?7, response_body = ?8,
		last_error = ?9, response_sha256 = ?10`, ``)
	// heartbeatSQL extends a lease that has not lapsed: a lapsed one belongs
	// to the expiry, whether or not a sweep has run yet.
	heartbeatSQL = `UPDATE idem_operations SET lease_until = ` + nowUS + ` + ?1, updated_at = ` + nowUS + `
		WHERE id = ?2 AND owner_token = ?3 AND fence = ?4 AND state = 'executing' AND lease_until >= ` + nowUS + `
		RETURNING lease_until`
)

// driver runs the store's statements for package steps, on q: the
// writer's connection inside a batch, or a caller's transaction.
type driver struct {
	s   *Store
	q   querier
	low bool // below the free-space floor: no new operations
}

var _ steps.Driver = driver{}

func (d driver) Insert(ctx context.Context, id, token string, p ledger.ReserveParams) (*ledger.Operation, error) {
	if d.low {
		return nil, d.belowFloor(ctx, p)
	}
	if p.Approval != nil {
		return d.insertForApproval(ctx, id, p)
	}
	state, attempts, reason := p.State(), 0, "reserve"
	var tokenArg any
	if state == ledger.Executing {
		attempts, reason, tokenArg = 1, ledger.ReasonReserveWithLease, token
	}
	var created, expires int64
	var leaseUntil sql.NullInt64
	err := queryRow(ctx, d.q, reserveSQL, id, p.Tenant, p.Key, p.Route, p.Fingerprint, string(state), attempts,
		tokenArg, p.Lease.Microseconds(), null(p.BusinessKey), null(p.ConcurrencyKey), p.Retention.Microseconds(),
		p.Actor, reason, null(p.Principal), null(p.Target), null(p.RunID), null(p.TraceID), null(p.Probe),
		p.Namespace, string(p.Kind), null(p.FingerprintRules)).Scan(&created, &leaseUntil, &expires)
	switch {
	case errors.Is(err, errNoRows):
		return nil, steps.ErrGuard
	case err != nil:
		return nil, mapErr("insert", err)
	}
	return p.NewOperation(id, fromMicro(created), micro(leaseUntil), fromMicro(expires)), nil
}

// belowFloor answers a reservation made while the disk is below the
// free-space floor: an existing key is answered as usual (a replay needs
// no space), a new one is refused before anything is written.
func (d driver) belowFloor(ctx context.Context, p ledger.ReserveParams) error {
	op, lapsed, err := d.Existing(ctx, p.OpKey())
	switch {
	case err == nil:
		return &steps.KeyTaken{Op: op, Lapsed: lapsed}
	case errors.Is(err, ledger.ErrNotFound):
		return d.s.floorError()
	}
	return err
}

func (d driver) Existing(ctx context.Context, k ledger.OpKey) (*ledger.Operation, bool, error) {
	var lapsed bool
	op, err := scanOp(scanExtra{queryRow(ctx, d.q, existingSQL, k.Tenant, k.Namespace, k.Key), &lapsed})
	return op, lapsed, mapErr("read existing", err)
}

// scanExtra scans the operation columns followed by extra destinations.
type scanExtra struct {
	row   row
	extra any
}

func (r scanExtra) Scan(dest ...any) error { return r.row.Scan(append(dest, r.extra)...) }

func (d driver) Apply(ctx context.Context, c steps.Change) (*ledger.Operation, error) {
	query, args, err := changeSQL(c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Step, err)
	}
	args = append([]any{c.ID, string(c.From), string(c.To), c.Actor, c.Reason}, args...)
	op, err := scanOp(queryRow(ctx, d.q, query, args...))
	if errors.Is(err, errNoRows) {
		return nil, steps.ErrGuard
	}
	return op, mapErr(string(c.Step), err)
}

// changeSQL picks the statement for a change and its own parameters (?6 on).
func changeSQL(c steps.Change) (string, []any, error) {
	status, headers, body, err := responseArgs(c.Response)
	switch c.Step {
	case ledger.StepComplete, ledger.StepCompleteLapsed:
		query := completeSQL
		if c.Step == ledger.StepCompleteLapsed {
			query = completeLapsedSQL
		}
		return query, []any{c.Owner.Token, c.Owner.Fence, status, headers, body,
			null(c.ResultRef), null(c.ErrorCode), null(c.Response.SHA256())}, err
	case ledger.StepRelease, ledger.StepMarkUnknown:
		return leaveSQL, []any{c.Owner.Token, c.Owner.Fence, null(c.ErrorCode)}, nil
	case ledger.StepAcquire:
		return acquireSQL, []any{c.NewToken, c.Lease.Microseconds(), null(c.RunID), null(c.TraceID)}, nil
	case ledger.StepResend:
		return resendSQL, []any{c.NewToken, c.Lease.Microseconds(), null(c.RunID), null(c.TraceID)}, nil
	case ledger.StepExpire:
		return expireOneSQL, []any{c.ErrorCode}, nil
	case ledger.StepResolve:
		return resolveSQL, []any{status, headers, body, null(c.ResultRef), null(c.Response.SHA256())}, err
	case ledger.StepDeny:
		return denySQL, []any{status, headers, body, null(c.ErrorCode), null(c.Response.SHA256())}, err
	}
	return "", nil, fmt.Errorf("no statement for step %s", c.Step)
}

func (d driver) ExtendLease(ctx context.Context, l ledger.Lease, dur time.Duration) (time.Time, error) {
	var until int64
	err := queryRow(ctx, d.q, heartbeatSQL, dur.Microseconds(), l.OpID, l.Token, l.Fence).Scan(&until)
	if errors.Is(err, errNoRows) {
		return time.Time{}, steps.ErrGuard
	}
	return fromMicro(until), mapErr("heartbeat", err)
}

func (d driver) Get(ctx context.Context, id string) (*ledger.Operation, error) {
	op, err := scanOp(queryRow(ctx, d.q, selectByIDSQL, id))
	return op, mapErr("get "+id, err)
}

// holderSQL finds the operation that holds a business key, or a
// concurrency key among the live ones.
var holderSQL = map[bool]string{
	true: `SELECT ` + opColumns + ` FROM idem_operations WHERE tenant = ? AND route = ? AND business_key = ?`,
	false: `SELECT ` + opColumns + ` FROM idem_operations WHERE tenant = ? AND route = ? AND concurrency_key = ?
		AND (state IN ('executing', 'unknown') OR (state = 'prepared' AND approval_status IN ('pending', 'approved')))`,
}

func (d driver) Holder(ctx context.Context, tenant, route string, business bool, value string) (*ledger.Operation, error) {
	op, err := scanOp(queryRow(ctx, d.q, holderSQL[business], tenant, route, value))
	return op, mapErr("holder", err)
}

func (d driver) OwnerToken(ctx context.Context, id string) (string, error) {
	var token sql.NullString
	err := queryRow(ctx, d.q, `SELECT owner_token FROM idem_operations WHERE id = ?`, id).Scan(&token)
	return token.String, mapErr("owner token", err)
}

// writerExec runs steps as jobs of the store's writer: each shares its
// batch's transaction and commit with the steps queued beside it.
type writerExec struct{ s *Store }

func (x writerExec) Exec(ctx context.Context, k steps.Kind, fn func(context.Context, steps.Driver) error) error {
	void, err := x.s.w.submit(ctx, k, func(ctx context.Context, b *batchTx) error {
		return fn(ctx, driver{s: x.s, q: b.conn, low: b.low})
	})
	if void {
		return &steps.VoidError{Err: err}
	}
	return err
}

// txExec runs steps in a caller's transaction: they commit with it.
type txExec struct {
	s  *Store
	tx *sql.Tx
}

func (x txExec) Exec(ctx context.Context, k steps.Kind, fn func(context.Context, steps.Driver) error) error {
	if err := x.s.checkFile(); err != nil {
		return err
	}
	return fn(ctx, driver{s: x.s, q: x.tx, low: (k == steps.Reserving || k == steps.Enqueuing) && x.s.belowFloor()})
}

// Tx is the ledger's steps in the caller's transaction tx, on a handle of
// this same database file, for a service that keeps its business data
// beside the ledger: a reservation, the effects it enqueues and its
// completion commit with tx's own writes, or roll back with them. What a
// step returns is as it will be once tx commits. tx must write from its
// start (open the handle with _txlock=immediate): a deferred transaction
// that reads first and writes later can fail with SQLITE_BUSY once the
// store's writer has written in between.
func (s *Store) Tx(tx *sql.Tx) ledger.Steps { return steps.On(txExec{s: s, tx: tx}) }
