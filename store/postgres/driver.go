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

// reserveSQL inserts the operation and its first history row in one
// statement. ON CONFLICT DO NOTHING makes the unique constraints the
// arbiters, (tenant, namespace, key) first, then the business and concurrency keys: of
// concurrent reservations exactly one inserts, and the others (having
// waited for its commit) insert nothing. When nothing is inserted, the same
// statement returns the key's operation if its snapshot sees it (a replay in
// one round trip); one committed during the statement needs a second read.
var reserveSQL = `WITH ins AS (
	INSERT INTO idem_operations (id, tenant, key, route, fingerprint, state, attempts, owner_token, fence,
		lease_until, business_key, concurrency_key, retention_us, created_at, updated_at, expires_at,
		principal, target, run_id, trace_id, probe, namespace, kind, fingerprint_rules)
	VALUES ($1, $2, $3, $4, $5, $6, $7::integer, $8, $7::integer,
		CASE WHEN $9::bigint > 0 THEN statement_timestamp() + $9::bigint * interval '1 microsecond' END,
		$10, $11, $12::bigint, statement_timestamp(), statement_timestamp(), statement_timestamp() + $12::bigint * interval '1 microsecond', $15, $16, $17, $18, $19, $20, $21, $22)
	ON CONFLICT DO NOTHING
	RETURNING ` + opColumns + `
), hist AS (
	` + recorded("ins", "NULL::text", "ins.state", "ins.created_at", "$13", "$14") + ` FROM ins
)
SELECT true, ` + opColumns + `, false FROM ins
UNION ALL
SELECT false, ` + opColumns + `, (state = 'executing' AND lease_until < statement_timestamp())
	FROM idem_operations WHERE tenant = $2 AND namespace = $20 AND key = $3 AND NOT EXISTS (SELECT 1 FROM ins)`

// existingSQL reads the operation that holds a key, and whether its lease has
// lapsed by the database's clock.
const existingSQL = `SELECT ` + opColumns + `, (state = 'executing' AND lease_until < statement_timestamp())
	FROM idem_operations WHERE tenant = $1 AND namespace = $2 AND key = $3`

// transitionSQL builds the one statement that makes a transition: a
// conditional UPDATE guarded by the source state (and, for owner steps, the
// owner token and fence), and the history row, in one CTE. Parameters $1 to
// $5 are id, from, to, actor and reason; set and guard use $6 onwards. The
// stored response is not read back: it is what the step wrote.
func transitionSQL(set, guard string) string {
	return `WITH up AS (
	UPDATE idem_operations SET state = $3, updated_at = statement_timestamp(),
		probe_token = NULL, probe_until = NULL, probe_next = NULL, -- a claim never outlives its unknown episode
		expires_at = statement_timestamp() + retention_us * interval '1 microsecond', ` + set + `
	WHERE id = $1 AND state = $2 ` + guard + `
	RETURNING ` + opColumnsNoBody + `
), hist AS (
	` + recorded("up", "$2::text", "$3::text", "up.updated_at", "$4", "$5") + ` FROM up
)
SELECT ` + opColumns + ` FROM up`
}

const ownerGuard = `AND owner_token = $6 AND fence = $7`

// lapsedMark prefixes the token of an owner whose lease the expiry took:
// no owner step matches it any more, except that owner's completion after
// the lapse (ledger.StepCompleteLapsed).
const lapsedMark = `'lapsed:' || `

// runContext records a new sender's agent run and trace ($8, $9) on the
// operation, for the events of its steps; none keeps the earlier ones.
const runContext = `run_id = coalesce($8::text, run_id), trace_id = coalesce($9::text, trace_id)`

// withCTE adds one more common table expression to a transition statement,
// before its final SELECT.
func withCTE(statement, cte string) string {
	i := strings.LastIndex(statement, "\nSELECT ")
	return statement[:i] + ", " + cte + statement[i:]
}

// lazy makes a transition statement commit without waiting for its WAL to
// reach the disk: visible to every session at once, durable a moment later.
// Owner steps use it only with durability=relaxed. If the server fails in
// that moment the step is lost, and the operation is still executing when
// the server comes back: its lease then makes it unknown. That is never a
// second effect; the reservation, which is what prevents one, always waits.
func lazy(statement string) string {
	final := "SELECT " + opColumns + " FROM up"
	return strings.Replace(statement, final,
		final+", (SELECT set_config('synchronous_commit', 'off', true)) AS lazy_commit", 1)
}

var (
	// Owner steps keep the owner token, so that an owner whose reply was
	// lost can retry its step and be told it happened (see steps.Make).
	completeSQL = transitionSQL(`lease_until = NULL, response_status = $8,
		response_headers = $9, response_body = $10, result_ref = $11, last_error = $12, response_sha256 = $13`, ownerGuard)
	// completeLapsedSQL is completeSQL for an operation the expiry took
	// from this owner (its token, marked by the expiry, and its fence):
	// nobody has moved it since. The token is restored, so that a retry
	// whose reply was lost is recognised (steps.Make). It is never lazy.
	completeLapsedSQL = transitionSQL(`owner_token = $6, lease_until = NULL, response_status = $8,
		response_headers = $9, response_body = $10, result_ref = $11, last_error = $12, response_sha256 = $13`,
		`AND owner_token = `+lapsedMark+`$6 AND fence = $7`)
	leaveSQL = transitionSQL(`lease_until = NULL, last_error = $8`, ownerGuard)
	// lazySQL is the lazy form of each owner step's statement.
	lazySQL = map[string]string{completeSQL: lazy(completeSQL), leaveSQL: lazy(leaveSQL)}
	// resendSQL counts an attempt and raises the fence: any earlier owner's
	// token and fence stop working at this commit.
	resendSQL = transitionSQL(`owner_token = $6, fence = fence + 1, attempts = attempts + 1,
		lease_until = statement_timestamp() + $7::bigint * interval '1 microsecond', `+runContext, ``)
	// acquireSQL is resendSQL for a prepared operation: one bound to an
	// approval is taken only while the approval is granted and in time,
	// and the approval is used by this very statement.
	acquireSQL = withCTE(transitionSQL(`owner_token = $6, fence = fence + 1, attempts = attempts + 1,
		lease_until = statement_timestamp() + $7::bigint * interval '1 microsecond',
		approval_status = CASE WHEN approval_id IS NULL THEN NULL ELSE 'used' END, `+runContext,
		`AND (approval_id IS NULL OR (approval_status IN ('approved', 'used') AND approval_expires_at >= statement_timestamp()))`),
		`used AS (UPDATE idem_approvals a SET status = 'used' FROM up WHERE a.id = up.approval_id AND a.status = 'approved')`)
	expireOneSQL = transitionSQL(`owner_token = `+lapsedMark+`owner_token, lease_until = NULL, last_error = $6`,
		`AND lease_until < statement_timestamp()`)
	resolveSQL = transitionSQL(`response_status = $6, response_headers = $7, response_body = $8,
		result_ref = coalesce($9, result_ref), response_sha256 = $10`, ``)
	denySQL = transitionSQL(`response_status = $6, response_headers = $7, response_body = $8,
		last_error = $9, response_sha256 = $10`, ``)
	// heartbeatSQL extends a lease that has not lapsed: a lapsed one belongs
	// to the expiry, whether or not a sweep has run yet.
	heartbeatSQL = `UPDATE idem_operations
		SET lease_until = statement_timestamp() + $4::bigint * interval '1 microsecond', updated_at = statement_timestamp()
		WHERE id = $1 AND owner_token = $2 AND fence = $3 AND state = 'executing' AND lease_until >= statement_timestamp()
		RETURNING lease_until`
)

// driver runs the store's statements for package steps: each write
// queued for a batch, or, with tx set, in the caller's transaction (see
// Tx), where reads must run too, to see what the transaction wrote.
type driver struct {
	s  *Store
	tx pgx.Tx
}

var _ steps.Driver = driver{}

// read runs a query of one row where the step runs.
func (d driver) read(ctx context.Context, query string, args ...any) pgx.Row {
	if d.tx != nil {
		return d.tx.QueryRow(ctx, query, args...)
	}
	return d.s.pool.QueryRow(ctx, query, args...)
}

// write runs a step's statement: in the caller's transaction, which
// commits it with its own writes, or in the next batch (m says whether,
// and how, it may merge with others of its kind; owner, that it is an
// owner's step).
func (d driver) write(ctx context.Context, m merge, owner bool, scan func(pgx.Row) error, query string, args ...any) error {
	if d.tx != nil {
		return scan(d.tx.QueryRow(ctx, query, args...))
	}
	return d.s.batch.run(ctx, m, owner, scan, query, args...)
}

func (d driver) Insert(ctx context.Context, id, token string, p ledger.ReserveParams) (*ledger.Operation, error) {
	if p.Approval != nil {
		return d.insertForApproval(ctx, id, p)
	}
	state, attempts, reason := p.State(), 0, "reserve"
	var tokenArg *string
	if state == ledger.Executing {
		attempts, reason, tokenArg = 1, ledger.ReasonReserveWithLease, &token
	}
	var inserted, lapsed bool
	var op *ledger.Operation
	err := d.write(ctx, reserves, false, func(row pgx.Row) (err error) {
		op, err = scanOp(scanAround{row, &inserted, &lapsed})
		return err
	}, reserveSQL, id, p.Tenant, p.Key, p.Route, p.Fingerprint, string(state), attempts, tokenArg, micros(p.Lease),
		nullable(p.BusinessKey), nullable(p.ConcurrencyKey), micros(p.Retention), p.Actor, reason,
		nullable(p.Principal), nullable(p.Target), nullable(p.RunID), nullable(p.TraceID), nullable(p.Probe),
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

func (d driver) Existing(ctx context.Context, k ledger.OpKey) (*ledger.Operation, bool, error) {
	var lapsed bool
	op, err := scanOp(scanExtra{d.read(ctx, existingSQL, k.Tenant, k.Namespace, k.Key), &lapsed})
	return op, lapsed, mapErr("read existing", err)
}

func (d driver) Apply(ctx context.Context, c steps.Change) (*ledger.Operation, error) {
	query, args, err := changeSQL(c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Step, err)
	}
	args = append([]any{c.ID, string(c.From), string(c.To), c.Actor, c.Reason}, args...)
	var op *ledger.Operation
	scan := func(row pgx.Row) (err error) {
		op, err = scanOp(row)
		return err
	}
	m := single
	if query == completeSQL {
		m = completes
	}
	err = d.write(ctx, m, c.Owner != nil, scan, query, args...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, steps.ErrGuard
	}
	return op, mapErr(string(c.Step), err)
}

// changeSQL picks the statement for a change and its own parameters ($6 on).
func changeSQL(c steps.Change) (string, []any, error) {
	status, headers, body, err := responseArgs(c.Response)
	switch c.Step {
	case ledger.StepComplete, ledger.StepCompleteLapsed:
		query := completeSQL
		if c.Step == ledger.StepCompleteLapsed {
			query = completeLapsedSQL
		}
		return query, []any{c.Owner.Token, c.Owner.Fence, status, headers, body,
			nullable(c.ResultRef), nullable(c.ErrorCode), nullable(c.Response.SHA256())}, err
	case ledger.StepRelease, ledger.StepMarkUnknown:
		return leaveSQL, []any{c.Owner.Token, c.Owner.Fence, nullable(c.ErrorCode)}, nil
	case ledger.StepAcquire:
		return acquireSQL, []any{c.NewToken, micros(c.Lease), nullable(c.RunID), nullable(c.TraceID)}, nil
	case ledger.StepResend:
		return resendSQL, []any{c.NewToken, micros(c.Lease), nullable(c.RunID), nullable(c.TraceID)}, nil
	case ledger.StepExpire:
		return expireOneSQL, []any{c.ErrorCode}, nil
	case ledger.StepResolve:
		return resolveSQL, []any{status, headers, body, nullable(c.ResultRef), nullable(c.Response.SHA256())}, err
	case ledger.StepDeny:
		return denySQL, []any{status, headers, body, nullable(c.ErrorCode), nullable(c.Response.SHA256())}, err
	}
	return "", nil, fmt.Errorf("no statement for step %s", c.Step)
}

func (d driver) ExtendLease(ctx context.Context, l ledger.Lease, dur time.Duration) (time.Time, error) {
	var until time.Time
	err := d.write(ctx, single, true, func(row pgx.Row) error { return row.Scan(&until) },
		heartbeatSQL, l.OpID, l.Token, l.Fence, micros(dur))
	if errors.Is(err, pgx.ErrNoRows) {
		return until, steps.ErrGuard
	}
	return until, mapErr("heartbeat", err)
}

func (d driver) Get(ctx context.Context, id string) (*ledger.Operation, error) {
	if err := ledger.Lookup("get", id); err != nil {
		return nil, err
	}
	op, err := scanOp(d.read(ctx, selectByIDSQL, id))
	return op, mapErr("get "+id, err)
}

// holderSQL finds the operation that holds a business key, or a
// concurrency key among the live ones.
var holderSQL = map[bool]string{
	true: `SELECT ` + opColumns + ` FROM idem_operations WHERE tenant = $1 AND route = $2 AND business_key = $3`,
	false: `SELECT ` + opColumns + ` FROM idem_operations WHERE tenant = $1 AND route = $2 AND concurrency_key = $3
		AND (state IN ('executing', 'unknown') OR (state = 'prepared' AND approval_status IN ('pending', 'approved')))`,
}

func (d driver) Holder(ctx context.Context, tenant, route string, business bool, value string) (*ledger.Operation, error) {
	op, err := scanOp(d.read(ctx, holderSQL[business], tenant, route, value))
	return op, mapErr("holder", err)
}

func (d driver) OwnerToken(ctx context.Context, id string) (string, error) {
	var token *string
	err := d.read(ctx, `SELECT owner_token FROM idem_operations WHERE id = $1`, id).Scan(&token)
	return deref(token), mapErr("owner token", err)
}

// scanAround scans a leading flag, the operation columns, then a trailing one.
type scanAround struct {
	row         pgx.Row
	first, last any
}

func (r scanAround) Scan(dest ...any) error {
	return r.row.Scan(append(append([]any{r.first}, dest...), r.last)...)
}

// scanExtra scans the operation columns followed by extra destinations.
type scanExtra struct {
	row   pgx.Row
	extra any
}

func (r scanExtra) Scan(dest ...any) error { return r.row.Scan(append(dest, r.extra)...) }

// poolExec runs steps on the store's own connections, each write
// batched with others (see batcher).
type poolExec struct{ s *Store }

func (x poolExec) Exec(ctx context.Context, k steps.Kind, fn func(context.Context, steps.Driver) error) error {
	if k == steps.Enqueuing {
		return x.s.enqueue(ctx, fn)
	}
	return fn(ctx, driver{s: x.s})
}

// txExec runs steps in a caller's transaction: they commit with it. It is
// the driver bound to that transaction, so running a step is a conversion.
type txExec driver

func (x txExec) Exec(ctx context.Context, _ steps.Kind, fn func(context.Context, steps.Driver) error) error {
	return fn(ctx, driver(x))
}

// Tx is the ledger's steps in the caller's transaction tx, for a service
// that keeps its business data in this database: a reservation, the
// effects it enqueues and its completion commit with tx's own writes, or
// roll back with them, so no crash can separate an effect from its
// record. What a step returns is as it will be once tx commits. tx's
// connection must find the store's tables on its search_path (open it
// with the store's DSN), and its commit waits for the disk unless the
// session says otherwise: the durability of tx is the caller's.
func (s *Store) Tx(tx pgx.Tx) ledger.Steps { return steps.On(txExec{s: s, tx: tx}) }
