package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/steps"
	"github.com/idemgate/idemgate/ledger"
)

// effectColumns is the column list every effect statement returns, in
// scanEffect's order.
const effectColumns = `seq, id, tenant, op_key, name, key, target, method, path, headers, body, fingerprint, state,
	attempts, fence, lease_until, next_at, status, result_ref, last_error, resolved_by, note, created_at, updated_at,
	namespace`

// insertEffectSQL writes a new effect, prepared and due now, unless its
// derived key is taken (by a concurrent transaction too: it waits for that
// one's end).
const insertEffectSQL = `INSERT INTO idem_effects (id, tenant, op_key, name, key, target, method, path, headers,
	body, fingerprint, state, retention_us, next_at, created_at, updated_at, namespace)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'prepared', $12, statement_timestamp(), statement_timestamp(), statement_timestamp(), $13)
ON CONFLICT (tenant, key) DO NOTHING
RETURNING ` + effectColumns

func (d driver) InsertEffect(ctx context.Context, id string, p ledger.EffectParams, fingerprint string) (*ledger.Effect, error) {
	headers, err := headerArg(p.Header)
	if err != nil {
		return nil, err
	}
	body := p.Body
	if body == nil {
		body = []byte{}
	}
	// seq is taken at the insert, not at the commit: were two transactions
	// to enqueue effects of one operation at once, the later effect could
	// commit, and go out, first. One operation's enqueues wait for each
	// other until their transaction ends. (Enqueue always runs in one: the
	// caller's, or its own.)
	if d.tx == nil {
		return nil, errors.New("insert effect: outside a transaction")
	}
	if _, err := d.tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`,
		p.Tenant+"\n"+p.Namespace+"\n"+p.OperationKey); err != nil {
		return nil, mapErr("insert effect: lock its operation", err)
	}
	e, err := scanEffect(d.read(ctx, insertEffectSQL, id, p.Tenant, p.OperationKey, p.Name, p.Key(), p.Target, p.Method,
		p.Path, headers, body, fingerprint, micros(p.Retention), p.Namespace))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, steps.ErrGuard
	}
	return e, mapErr("insert effect", err)
}

func (d driver) EffectByKey(ctx context.Context, tenant, key string) (*ledger.Effect, error) {
	e, err := scanEffect(d.read(ctx, `SELECT `+effectColumns+` FROM idem_effects WHERE tenant = $1 AND key = $2`,
		tenant, key))
	return e, mapErr("effect "+key, err)
}

// enqueue runs an Enqueue on the store's own connections in a
// transaction of its own: its effects are written all together, or none.
func (s *Store) enqueue(ctx context.Context, fn func(context.Context, steps.Driver) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return fn(ctx, driver{s: s, tx: tx}) })
}

// The two statements of a claim, sent together: one round trip, one
// implicit transaction, one commit. lapseEffectsSQL makes the deliveries
// whose lease lapsed unknown: sent, maybe delivered; due again at once,
// or parked once they used their last attempt ($1, 0 for no bound).
// claimEffectsSQL then (a statement of its own, so it sees them) takes
// the due effects of the targets ($3) whose operation's earlier effects
// all succeeded, oldest due first: a token ($1 and the id), a larger
// fence, a lease of $2. SKIP LOCKED lets relays claim at once, each
// effect once.
var (
	lapseEffectsSQL = `UPDATE idem_effects SET state = 'unknown', lease_until = NULL, owner_token = NULL,
	last_error = 'lease_expired', updated_at = statement_timestamp(), next_at = CASE WHEN $1 > 0 AND attempts >= $1 THEN NULL ELSE statement_timestamp() END
WHERE state = 'executing' AND lease_until < statement_timestamp()`
	claimEffectsSQL = `WITH due AS (
	SELECT e.seq FROM idem_effects e
	WHERE e.state IN ('prepared', 'unknown') AND e.next_at <= statement_timestamp() AND e.target = ANY($3)
		AND NOT EXISTS (SELECT 1 FROM idem_effects b WHERE b.tenant = e.tenant AND b.op_key = e.op_key
			AND b.namespace = e.namespace AND b.seq < e.seq AND b.state <> 'succeeded')
	ORDER BY e.next_at, e.seq LIMIT $4
	FOR UPDATE SKIP LOCKED
)
UPDATE idem_effects f SET state = 'executing', owner_token = $1 || f.id, fence = f.fence + 1,
	attempts = f.attempts + 1, lease_until = statement_timestamp() + $2::bigint * interval '1 microsecond', next_at = NULL,
	updated_at = statement_timestamp()
FROM due WHERE f.seq = due.seq AND f.state IN ('prepared', 'unknown')
RETURNING ` + qualifiedEffect + `, f.owner_token, f.lease_until`
)

// qualifiedEffect is effectColumns of the claim's table alias.
var qualifiedEffect = qualified("f", effectColumns)

// ClaimEffects implements ledger.Store.
func (s *Store) ClaimEffects(ctx context.Context, p ledger.EffectClaimParams) ([]ledger.EffectClaim, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	queueClaim(b, p)
	br := s.pool.SendBatch(ctx, b)
	out, err := claimed(br, len(claimPlan)+1)
	// The batch's implicit transaction commits at its end: its error, if
	// any, comes with Close.
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, mapErr("claim effects", err)
	}
	return out, nil
}

// queueClaim queues a claim's statements. The due effects are walked in
// the order of idem_effects_due, and the walk stops at the limit: planned
// from the statistics of a table that just filled (a backlog enqueued
// faster than autovacuum analyses it), the server would rather gather
// every due effect, check each one's predecessors and sort them all to
// claim sixteen, a cost that grows with the backlog (13 ms a claim at
// 2,000 due, against 0.5 ms). Local settings hold for the claim's
// transaction alone, and for the statements queued after them.
func queueClaim(b *pgx.Batch, p ledger.EffectClaimParams) {
	queuePlan(b)
	queueClaimOnly(b, p)
}

// queuePlan queues the claim's planner settings.
func queuePlan(b *pgx.Batch) {
	for _, setting := range claimPlan {
		b.Queue("SELECT set_config($1, 'off', true)", setting)
	}
}

// queueClaimOnly queues a claim's statements after its settings.
func queueClaimOnly(b *pgx.Batch, p ledger.EffectClaimParams) {
	b.Queue(lapseEffectsSQL, p.MaxAttempts)
	b.Queue(claimEffectsSQL, ledger.NewToken()+":", micros(p.Lease), p.Targets, p.Limit)
}

// claimPlan are the planner settings a claim turns off.
var claimPlan = []string{"enable_bitmapscan", "enable_sort", "enable_seqscan"}

// claimed reads a claim's results: preamble statements (the settings, the
// lapsed leases) whose results are only checked, then the claims.
func claimed(br pgx.BatchResults, preamble int) ([]ledger.EffectClaim, error) {
	for range preamble {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.EffectClaim, error) {
		var c ledger.EffectClaim
		e, err := scanEffect(scanMore{r, []any{&c.Lease.Token, &c.Lease.Until}})
		if err != nil {
			return c, err
		}
		c.Effect, c.Lease.EffectID, c.Lease.Fence = e, e.ID, e.Fence
		return c, nil
	})
}

// effectResultSQL ends a delivery under its claim, while its lease holds
// by the store's clock: past it the claim is void, swept or not. $5 is the
// delay before it is due again, in microseconds (NULL: never). The owner
// token stays, so that a relay whose reply was lost can record it again
// and be told it is done.
const effectResultSQL = `UPDATE idem_effects SET state = $4, lease_until = NULL,
	next_at = statement_timestamp() + $5::bigint * interval '1 microsecond', status = $6,
	result_ref = coalesce($7, result_ref), last_error = $8, updated_at = statement_timestamp(),
	expires_at = CASE WHEN $4 IN ('succeeded', 'failed') THEN statement_timestamp() + retention_us * interval '1 microsecond' END
WHERE id = $1 AND state = 'executing' AND owner_token = $2 AND fence = $3 AND lease_until >= statement_timestamp()
RETURNING ` + effectColumns

// EffectResult implements ledger.Store.
func (s *Store) EffectResult(ctx context.Context, l ledger.EffectLease, o ledger.EffectOutcome) (*ledger.Effect, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	var retry *int64
	if !o.State.Final() && !o.Park {
		us := o.RetryIn.Microseconds()
		retry = &us
	}
	// Batched as an owner's step is: the results of concurrent deliveries
	// share one transaction and one wait for the disk.
	var e *ledger.Effect
	err := s.batch.run(ctx, single, true, func(row pgx.Row) (err error) {
		e, err = scanEffect(row)
		return err
	}, effectResultSQL, l.EffectID, l.Token, l.Fence, string(o.State), retry, nullable(o.Status),
		nullable(o.ResultRef), nullable(o.ErrorCode))
	if !errors.Is(err, pgx.ErrNoRows) {
		return e, mapErr("effect result", err)
	}
	return s.effectRefused(ctx, l, o.State)
}

// settleResultsSQL is effectResultSQL over arrays: a turn's results in
// one statement, each under its own claim's guard. It returns the
// positions of the results it recorded (two results of one effect, under
// an old claim and a new one, are told apart); a result missing from
// them was refused, or recorded before.
const settleResultsSQL = `UPDATE idem_effects e SET state = r.state, lease_until = NULL,
	next_at = statement_timestamp() + r.retry_us * interval '1 microsecond', status = r.status,
	result_ref = coalesce(r.result_ref, e.result_ref), last_error = r.last_error, updated_at = statement_timestamp(),
	expires_at = CASE WHEN r.state IN ('succeeded', 'failed') THEN statement_timestamp() + e.retention_us * interval '1 microsecond' END
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::bigint[], $6::integer[], $7::text[], $8::text[])
	WITH ORDINALITY AS r(id, token, fence, state, retry_us, status, result_ref, last_error, ord)
WHERE e.id = r.id AND e.state = 'executing' AND e.owner_token = r.token AND e.fence = r.fence
	AND e.lease_until >= statement_timestamp()
RETURNING r.ord`

// SettleEffects implements ledger.Store: the results in one statement,
// then the claim's, sent together: one round trip, one implicit
// transaction, one commit. A refused result is read after it, as
// EffectResult reads one.
func (s *Store) SettleEffects(ctx context.Context, p ledger.EffectSettle) (ledger.EffectSettled, error) {
	if err := p.Validate(); err != nil {
		return ledger.EffectSettled{}, err
	}
	out := ledger.EffectSettled{Recorded: make([]error, len(p.Results))}
	if len(p.Results) == 0 && p.Claim.Limit == 0 {
		return out, nil
	}
	// The settings come first: planned once while the table was small,
	// the results' cached plan would otherwise scan it whole for ever
	// after; without sequential scans it looks each effect up by its id.
	b := &pgx.Batch{}
	queuePlan(b)
	if len(p.Results) > 0 {
		b.Queue(settleResultsSQL, settleArgs(p.Results)...)
	}
	if p.Claim.Limit > 0 {
		queueClaimOnly(b, p.Claim)
	}
	br := s.pool.SendBatch(ctx, b)
	recorded, err := settled(br, len(p.Results) > 0, p.Claim.Limit > 0, &out)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return ledger.EffectSettled{}, mapErr("settle effects", err)
	}
	for i, r := range p.Results {
		if !recorded[int64(i+1)] {
			_, out.Recorded[i] = s.effectRefused(ctx, r.Lease, r.Outcome.State)
		}
	}
	return out, nil
}

// settleArgs are a turn's results as settleResultsSQL's arrays.
func settleArgs(rs []ledger.EffectResult) []any {
	n := len(rs)
	ids, tokens, states := make([]string, n), make([]string, n), make([]string, n)
	fences, retries, statuses := make([]int64, n), make([]*int64, n), make([]*int32, n)
	refs, errs := make([]*string, n), make([]*string, n)
	for i, r := range rs {
		o := r.Outcome
		ids[i], tokens[i], fences[i], states[i] = r.Lease.EffectID, r.Lease.Token, r.Lease.Fence, string(o.State)
		if !o.State.Final() && !o.Park {
			us := o.RetryIn.Microseconds()
			retries[i] = &us
		}
		statuses[i], refs[i], errs[i] = nullable(int32(o.Status)), nullable(o.ResultRef), nullable(o.ErrorCode)
	}
	return []any{ids, tokens, fences, states, retries, statuses, refs, errs}
}

// settled reads a turn's results: the settings, the positions (from 1)
// of the results recorded, then the claim's.
func settled(br pgx.BatchResults, results, claim bool, out *ledger.EffectSettled) (map[int64]bool, error) {
	for range claimPlan {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	recorded := map[int64]bool{}
	if results {
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		ords, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return nil, err
		}
		for _, o := range ords {
			recorded[o] = true
		}
	}
	if claim {
		var err error
		if out.Claims, err = claimed(br, 1); err != nil { // the lapsed leases first
			return nil, err
		}
	}
	return recorded, nil
}

// effectRefused says why a result was refused, or, when this very result
// was recorded already (a retry after a lost reply), returns the effect.
func (s *Store) effectRefused(ctx context.Context, l ledger.EffectLease, to ledger.State) (*ledger.Effect, error) {
	var token *string
	e, err := scanEffect(scanMore{s.pool.QueryRow(ctx, `SELECT `+effectColumns+`, owner_token FROM idem_effects
		WHERE id = $1`, l.EffectID), []any{&token}})
	if err != nil {
		return nil, mapErr("effect result", err)
	}
	return steps.EffectRefusal(e, deref(token), l, to)
}

// resolveEffectSQL settles an effect that is neither final nor executing
// on an operator's word, or makes a failed one prepared; prepared makes it
// due now. It ends any claim's hold on it.
const resolveEffectSQL = `UPDATE idem_effects SET state = $3, resolved_by = $4, note = $5, owner_token = NULL,
	result_ref = coalesce($6, result_ref), updated_at = statement_timestamp(),
	next_at = CASE WHEN $3 = 'prepared' THEN statement_timestamp() END,
	expires_at = CASE WHEN $3 IN ('succeeded', 'failed') THEN statement_timestamp() + retention_us * interval '1 microsecond' END
WHERE id = $1 AND tenant = $2 AND (state IN ('prepared', 'unknown') OR (state = 'failed' AND $3 = 'prepared'))
RETURNING ` + effectColumns

// ResolveEffect implements ledger.Store.
func (s *Store) ResolveEffect(ctx context.Context, p ledger.EffectResolveParams) (*ledger.Effect, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	e, err := scanEffect(s.pool.QueryRow(ctx, resolveEffectSQL, p.ID, p.Tenant, string(p.To), p.Actor, p.Note,
		nullable(p.ResultRef)))
	if !errors.Is(err, pgx.ErrNoRows) {
		return e, mapErr("resolve effect", err)
	}
	current, err := scanEffect(s.pool.QueryRow(ctx, `SELECT `+effectColumns+` FROM idem_effects
		WHERE id = $1 AND tenant = $2`, p.ID, p.Tenant))
	if err != nil {
		return nil, mapErr("resolve effect "+p.ID, err)
	}
	return current, steps.EffectNotResolvable(current)
}

// Effects implements ledger.Store.
func (s *Store) Effects(ctx context.Context, k ledger.OpKey) ([]*ledger.Effect, error) {
	if !ledger.Holdable(k.Tenant, k.Namespace, k.Key) {
		return nil, nil // as for any key it does not hold
	}
	rows, err := s.pool.Query(ctx, `SELECT `+effectColumns+` FROM idem_effects WHERE tenant = $1 AND op_key = $2
		AND namespace = $3 ORDER BY seq`, k.Tenant, k.Key, k.Namespace)
	if err != nil {
		return nil, mapErr("effects", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*ledger.Effect, error) { return scanEffect(r) })
	return out, mapErr("effects", err)
}

// GetEffect implements ledger.Store.
func (s *Store) GetEffect(ctx context.Context, id string) (*ledger.Effect, error) {
	if err := ledger.Lookup("effect", id); err != nil {
		return nil, err
	}
	e, err := scanEffect(s.pool.QueryRow(ctx, `SELECT `+effectColumns+` FROM idem_effects WHERE id = $1`, id))
	return e, mapErr("effect "+id, err)
}

// purgeEffectsSQL deletes a batch of final effects past their retention,
// but none that an effect of its operation not yet final follows: a
// purged failure would release the effects it holds back.
const purgeEffectsSQL = `WITH due AS (
	SELECT e.seq FROM idem_effects e WHERE e.state IN ('succeeded', 'failed') AND e.expires_at < statement_timestamp()
		AND NOT EXISTS (SELECT 1 FROM idem_effects b WHERE b.tenant = e.tenant AND b.op_key = e.op_key
			AND b.namespace = e.namespace AND b.seq > e.seq AND b.state NOT IN ('succeeded', 'failed'))
	ORDER BY e.expires_at LIMIT $1
	FOR UPDATE SKIP LOCKED
), gone AS (
	DELETE FROM idem_effects e USING due WHERE e.seq = due.seq RETURNING e.seq
)
SELECT count(*) FROM gone`

func scanEffect(row pgx.Row) (*ledger.Effect, error) {
	var (
		e                              ledger.Effect
		state                          string
		headers                        []byte
		leaseUntil, nextAt             *time.Time
		status                         *int32
		resultRef, lastError, by, note *string
	)
	err := row.Scan(&e.Seq, &e.ID, &e.Tenant, &e.OperationKey, &e.Name, &e.Key, &e.Target, &e.Method, &e.Path, &headers,
		&e.Body, &e.Fingerprint, &state, &e.Attempts, &e.Fence, &leaseUntil, &nextAt, &status, &resultRef, &lastError,
		&by, &note, &e.CreatedAt, &e.UpdatedAt, &e.Namespace)
	if err != nil {
		return nil, err
	}
	e.State, e.LeaseUntil, e.NextAt, e.Status = ledger.State(state), deref(leaseUntil), deref(nextAt), int(deref(status))
	e.ResultRef, e.LastError, e.ResolvedBy, e.Note = deref(resultRef), deref(lastError), deref(by), deref(note)
	if len(headers) > 0 {
		if err := json.Unmarshal(headers, &e.Header); err != nil {
			return nil, fmt.Errorf("effect %s: stored headers: %w", e.ID, err)
		}
	}
	return &e, nil
}

// headerArg stores a header as JSON; none stores NULL.
func headerArg(h map[string][]string) ([]byte, error) {
	if len(h) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode headers: %w", err)
	}
	return b, nil
}
