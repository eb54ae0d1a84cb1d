package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemgate/idemgate/internal/steps"
	"github.com/idemgate/idemgate/ledger"
)

// effectColumns is the column list every effect statement returns, in
// scanEffect's order.
const effectColumns = `seq, id, tenant, op_key, name, key, target, method, path, headers, body, fingerprint, state,
	attempts, fence, lease_until, next_at, status, result_ref, last_error, resolved_by, note, created_at, updated_at,
	namespace`

// insertEffectSQL writes a new effect, prepared and due now, unless its
// derived key is taken.
const insertEffectSQL = `INSERT INTO idem_effects (id, tenant, op_key, name, key, target, method, path, headers,
	body, fingerprint, state, retention_us, next_at, created_at, updated_at, namespace)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 'prepared', ?12, ` + nowUS + `, ` + nowUS + `, ` + nowUS + `, ?13)
ON CONFLICT (tenant, key) DO NOTHING
RETURNING ` + effectColumns

func (d driver) InsertEffect(ctx context.Context, id string, p ledger.EffectParams, fingerprint string) (*ledger.Effect, error) {
	if d.low {
		return nil, d.s.floorError()
	}
	headers, err := headerArg(p.Header)
	if err != nil {
		return nil, err
	}
	body := p.Body
	if body == nil {
		body = []byte{}
	}
	e, err := scanEffect(queryRow(ctx, d.q, insertEffectSQL, id, p.Tenant, p.OperationKey, p.Name, p.Key(), p.Target,
		p.Method, p.Path, headers, body, fingerprint, p.Retention.Microseconds(), p.Namespace))
	if errors.Is(err, errNoRows) {
		return nil, steps.ErrGuard
	}
	return e, mapErr("insert effect", err)
}

func (d driver) EffectByKey(ctx context.Context, tenant, key string) (*ledger.Effect, error) {
	e, err := scanEffect(queryRow(ctx, d.q, `SELECT `+effectColumns+` FROM idem_effects WHERE tenant = ? AND key = ?`,
		tenant, key))
	return e, mapErr("effect "+key, err)
}

// The two statements of a claim. lapseEffectsSQL makes the deliveries
// whose lease lapsed unknown: sent, maybe delivered; due again at once,
// or parked once they used their last attempt (?1, 0 for no bound).
// claimEffectsSQL then takes the due effects of the targets (?3, a JSON
// array) whose operation's earlier effects all succeeded, oldest due
// first: a token (?1 and the id), a larger fence, a lease of ?2.
const (
	lapseEffectsSQL = `UPDATE idem_effects SET state = 'unknown', lease_until = NULL, owner_token = NULL,
	last_error = 'lease_expired',
	updated_at = ` + nowUS + `, next_at = CASE WHEN ?1 > 0 AND attempts >= ?1 THEN NULL ELSE ` + nowUS + ` END
WHERE state = 'executing' AND lease_until < ` + nowUS
	claimEffectsSQL = `UPDATE idem_effects SET state = 'executing', owner_token = ?1 || id, fence = fence + 1,
	attempts = attempts + 1, lease_until = ` + nowUS + ` + ?2, next_at = NULL, updated_at = ` + nowUS + `
WHERE seq IN (SELECT e.seq FROM idem_effects e
	WHERE e.state IN ('prepared', 'unknown') AND e.next_at <= ` + nowUS + `
		AND e.target IN (SELECT value FROM json_each(?3))
		AND NOT EXISTS (SELECT 1 FROM idem_effects b WHERE b.tenant = e.tenant AND b.op_key = e.op_key
			AND b.namespace = e.namespace AND b.seq < e.seq AND b.state <> 'succeeded')
	ORDER BY e.next_at, e.seq LIMIT ?4)
RETURNING ` + effectColumns + `, owner_token, lease_until`
)

// ClaimEffects implements ledger.Store.
func (s *Store) ClaimEffects(ctx context.Context, p ledger.EffectClaimParams) ([]ledger.EffectClaim, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	c, err := newClaim(p)
	if err != nil {
		return nil, err
	}
	return step(s, ctx, durable, func(ctx context.Context, d driver) ([]ledger.EffectClaim, error) {
		return d.claimEffects(ctx, c)
	})
}

// claim is a validated claim's arguments.
type claim struct {
	p       ledger.EffectClaimParams
	targets string
	prefix  string
}

func newClaim(p ledger.EffectClaimParams) (claim, error) {
	targets, err := json.Marshal(p.Targets)
	if err != nil {
		return claim{}, fmt.Errorf("claim effects: %w", err)
	}
	return claim{p: p, targets: string(targets), prefix: ledger.NewToken() + ":"}, nil
}

// claimEffects makes lapsed deliveries unknown, then claims what is due.
func (d driver) claimEffects(ctx context.Context, c claim) ([]ledger.EffectClaim, error) {
	if _, err := d.q.(*writeConn).ExecContext(ctx, lapseEffectsSQL, c.p.MaxAttempts); err != nil {
		return nil, mapErr("claim effects: lapsed leases", err)
	}
	var out []ledger.EffectClaim
	err := eachRow(ctx, d.q, claimEffectsSQL, []any{c.prefix, c.p.Lease.Microseconds(), c.targets, c.p.Limit},
		func(r *sql.Rows) error {
			var c ledger.EffectClaim
			var until int64
			e, err := scanEffect(scanExtra4{r, []any{&c.Lease.Token, &until}})
			if err != nil {
				return err
			}
			c.Effect, c.Lease.EffectID, c.Lease.Fence, c.Lease.Until = e, e.ID, e.Fence, fromMicro(until)
			out = append(out, c)
			return nil
		})
	return out, mapErr("claim effects", err)
}

// effectResultSQL ends a delivery under its claim, while its lease holds
// by the store's clock: past it the claim is void, swept or not. ?5 is
// the delay before it is due again, in microseconds (NULL: never). The
// owner token stays, so that a relay whose reply was lost can record it
// again and be told it is done.
const effectResultSQL = `UPDATE idem_effects SET state = ?4, lease_until = NULL,
	next_at = CASE WHEN ?5 IS NULL THEN NULL ELSE ` + nowUS + ` + ?5 END, status = ?6,
	result_ref = coalesce(?7, result_ref), last_error = ?8, updated_at = ` + nowUS + `,
	expires_at = CASE WHEN ?4 IN ('succeeded', 'failed') THEN ` + nowUS + ` + retention_us END
WHERE id = ?1 AND state = 'executing' AND owner_token = ?2 AND fence = ?3 AND lease_until >= ` + nowUS + `
RETURNING ` + effectColumns

// EffectResult implements ledger.Store.
func (s *Store) EffectResult(ctx context.Context, l ledger.EffectLease, o ledger.EffectOutcome) (*ledger.Effect, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return step(s, ctx, owning, func(ctx context.Context, d driver) (*ledger.Effect, error) {
		return d.effectResult(ctx, l, o)
	})
}

// effectResult records one outcome under its claim, or says why not.
func (d driver) effectResult(ctx context.Context, l ledger.EffectLease, o ledger.EffectOutcome) (*ledger.Effect, error) {
	var retry, status any
	if !o.State.Final() && !o.Park {
		retry = o.RetryIn.Microseconds()
	}
	if o.Status != 0 {
		status = o.Status
	}
	e, err := scanEffect(queryRow(ctx, d.q, effectResultSQL, l.EffectID, l.Token, l.Fence, string(o.State), retry,
		status, null(o.ResultRef), null(o.ErrorCode)))
	if errors.Is(err, errNoRows) {
		return d.effectRefused(ctx, l, o.State)
	}
	return e, mapErr("effect result", err)
}

// SettleEffects implements ledger.Store: the turn is one writer step,
// so one transaction and one commit. A claim waits for the disk; a turn
// that only records is an owner's step, as EffectResult is.
func (s *Store) SettleEffects(ctx context.Context, p ledger.EffectSettle) (ledger.EffectSettled, error) {
	if err := p.Validate(); err != nil {
		return ledger.EffectSettled{}, err
	}
	k, c := owning, claim{}
	if p.Claim.Limit > 0 {
		var err error
		if c, err = newClaim(p.Claim); err != nil {
			return ledger.EffectSettled{}, err
		}
		k = durable
	}
	return step(s, ctx, k, func(ctx context.Context, d driver) (ledger.EffectSettled, error) {
		out := ledger.EffectSettled{Recorded: make([]error, len(p.Results))}
		for i, r := range p.Results {
			// A refusal is that result's answer; anything else ends the turn.
			_, err := d.effectResult(ctx, r.Lease, r.Outcome)
			if err != nil && !refusal(err) {
				return out, err
			}
			out.Recorded[i] = err
		}
		if p.Claim.Limit == 0 {
			return out, nil
		}
		var err error
		if out.Claims, err = d.claimEffects(ctx, c); err != nil && refusal(err) {
			// Not a step's own answer: the whole turn fails, its results
			// with it, rather than commit them without the claim.
			err = fmt.Errorf("claim effects: %v", err)
		}
		return out, err
	})
}

// effectRefused says why a delivery's result was refused, or, when this
// very result was recorded already (a retry after a lost reply), returns
// the effect as it stands.
func (d driver) effectRefused(ctx context.Context, l ledger.EffectLease, to ledger.State) (*ledger.Effect, error) {
	var token sql.NullString
	e, err := scanEffect(scanExtra4{queryRow(ctx, d.q, `SELECT `+effectColumns+`, owner_token FROM idem_effects
		WHERE id = ?`, l.EffectID), []any{&token}})
	if err != nil {
		return nil, mapErr("effect result", err)
	}
	return steps.EffectRefusal(e, token.String, l, to)
}

// resolveEffectSQL settles an effect that is neither final nor executing
// on an operator's word, or makes a failed one prepared; prepared makes it
// due now. It ends any claim's hold on it.
const resolveEffectSQL = `UPDATE idem_effects SET state = ?3, resolved_by = ?4, note = ?5, owner_token = NULL,
	result_ref = coalesce(?6, result_ref), updated_at = ` + nowUS + `,
	next_at = CASE WHEN ?3 = 'prepared' THEN ` + nowUS + ` END,
	expires_at = CASE WHEN ?3 IN ('succeeded', 'failed') THEN ` + nowUS + ` + retention_us END
WHERE id = ?1 AND tenant = ?2 AND (state IN ('prepared', 'unknown') OR (state = 'failed' AND ?3 = 'prepared'))
RETURNING ` + effectColumns

// ResolveEffect implements ledger.Store.
func (s *Store) ResolveEffect(ctx context.Context, p ledger.EffectResolveParams) (*ledger.Effect, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return step(s, ctx, durable, func(ctx context.Context, d driver) (*ledger.Effect, error) {
		e, err := scanEffect(queryRow(ctx, d.q, resolveEffectSQL, p.ID, p.Tenant, string(p.To), p.Actor, p.Note,
			null(p.ResultRef)))
		if !errors.Is(err, errNoRows) {
			return e, mapErr("resolve effect", err)
		}
		current, err := scanEffect(queryRow(ctx, d.q, `SELECT `+effectColumns+` FROM idem_effects WHERE id = ? AND tenant = ?`,
			p.ID, p.Tenant))
		if err != nil {
			return nil, mapErr("resolve effect "+p.ID, err)
		}
		return current, steps.EffectNotResolvable(current)
	})
}

// Effects implements ledger.Store.
func (s *Store) Effects(ctx context.Context, k ledger.OpKey) ([]*ledger.Effect, error) {
	var out []*ledger.Effect
	err := s.each(ctx, `SELECT `+effectColumns+` FROM idem_effects WHERE tenant = ? AND op_key = ? AND namespace = ?
		ORDER BY seq`, []any{k.Tenant, k.Key, k.Namespace}, func(r *sql.Rows) error {
		e, err := scanEffect(r)
		out = append(out, e)
		return err
	})
	return out, mapErr("effects", err)
}

// GetEffect implements ledger.Store.
func (s *Store) GetEffect(ctx context.Context, id string) (*ledger.Effect, error) {
	e, err := scanEffect(queryRow(ctx, s.reads, `SELECT `+effectColumns+` FROM idem_effects WHERE id = ?`, id))
	return e, mapErr("effect "+id, err)
}

// purgeEffectsSQL deletes a batch of final effects past their retention,
// but none that an effect of its operation not yet final follows: a
// purged failure would release the effects it holds back.
const purgeEffectsSQL = `DELETE FROM idem_effects WHERE seq IN (SELECT e.seq FROM idem_effects e
	WHERE e.state IN ('succeeded', 'failed') AND e.expires_at < ` + nowUS + `
		AND NOT EXISTS (SELECT 1 FROM idem_effects b WHERE b.tenant = e.tenant AND b.op_key = e.op_key
			AND b.namespace = e.namespace AND b.seq > e.seq AND b.state NOT IN ('succeeded', 'failed'))
	ORDER BY e.expires_at LIMIT ?1)`

func scanEffect(r row) (*ledger.Effect, error) {
	var (
		e                              ledger.Effect
		state                          string
		headers                        []byte
		leaseUntil, nextAt, status     sql.NullInt64
		resultRef, lastError, by, note sql.NullString
		created, updated               int64
	)
	err := r.Scan(&e.Seq, &e.ID, &e.Tenant, &e.OperationKey, &e.Name, &e.Key, &e.Target, &e.Method, &e.Path, &headers,
		&e.Body, &e.Fingerprint, &state, &e.Attempts, &e.Fence, &leaseUntil, &nextAt, &status, &resultRef, &lastError,
		&by, &note, &created, &updated, &e.Namespace)
	if err != nil {
		return nil, err
	}
	e.State, e.LeaseUntil, e.NextAt, e.Status = ledger.State(state), micro(leaseUntil), micro(nextAt), int(status.Int64)
	e.ResultRef, e.LastError, e.ResolvedBy, e.Note = resultRef.String, lastError.String, by.String, note.String
	e.CreatedAt, e.UpdatedAt = fromMicro(created), fromMicro(updated)
	if len(headers) > 0 {
		if err := json.Unmarshal(headers, &e.Header); err != nil {
			return nil, fmt.Errorf("effect %s: stored headers: %w", e.ID, err)
		}
	}
	return &e, nil
}

// headerArg stores a header as JSON; none stores NULL.
func headerArg(h map[string][]string) (any, error) {
	if len(h) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode headers: %w", err)
	}
	return b, nil
}
