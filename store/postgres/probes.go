package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/ledger"
)

// claimProbesSQL claims the due unknown operations of the routes, oldest
// due first; SKIP LOCKED lets reconcilers of several instances claim at
// once, each operation once. The state is untouched: a claim is no
// transition.
var claimProbesSQL = `WITH due AS (
	SELECT id FROM idem_operations
	WHERE state = 'unknown' AND route = ANY($3) AND coalesce(probe_next, '-infinity') <= statement_timestamp()
		AND coalesce(probe_until, '-infinity') < statement_timestamp()
	ORDER BY probe_next NULLS FIRST, id LIMIT $4
	FOR UPDATE SKIP LOCKED
)
UPDATE idem_operations o SET probe_token = $1 || o.id, probe_fence = o.probe_fence + 1,
	probe_until = statement_timestamp() + $2::bigint * interval '1 microsecond', probes = o.probes + 1
FROM due WHERE o.id = due.id AND o.state = 'unknown'
RETURNING ` + qualified("o", opColumnsNoBody) + `, o.probe_token, o.probe_fence, o.probe_until, o.probes`

// ClaimProbes implements ledger.Store.
func (s *Store) ClaimProbes(ctx context.Context, p ledger.ProbeClaimParams) ([]ledger.ProbeClaim, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, claimProbesSQL, ledger.NewToken()+":", micros(p.Lease), p.Routes, p.Limit)
	if err != nil {
		return nil, mapErr("claim probes", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.ProbeClaim, error) {
		var c ledger.ProbeClaim
		op, err := scanOp(scanMore{r, []any{&c.Lease.Token, &c.Lease.Fence, &c.Lease.Until, &c.Lease.Probes}})
		if err != nil {
			return c, err
		}
		c.Op, c.Lease.OpID, c.Lease.Actor = op, op.ID, ledger.ActorReconciler
		return c, nil
	})
	return out, mapErr("claim probes", err)
}

// scanMore scans the operation columns followed by several more.
type scanMore struct {
	row   pgx.Row
	extra []any
}

func (r scanMore) Scan(dest ...any) error { return r.row.Scan(append(dest, r.extra...)...) }

// probeGuard is a probe result's guard: still unknown, still this claim.
const probeGuard = `WHERE id = $1 AND state = 'unknown' AND probe_token = $2 AND probe_fence = $3`

var (
	// probeResolveSQL moves the operation on a probe's proof, with its
	// history and audit event (resolved) in the same statement.
	probeResolveSQL = `WITH up AS (
	UPDATE idem_operations SET state = $4, updated_at = statement_timestamp(),
		expires_at = statement_timestamp() + retention_us * interval '1 microsecond', response_status = $7, response_headers = $8,
		response_body = $9, response_sha256 = $10, result_ref = coalesce($11, result_ref),
		last_error = CASE WHEN $4 = 'prepared' THEN 'reconciled_not_applied' ELSE last_error END,
		probe_token = NULL, probe_until = NULL, probe_next = NULL
	` + probeGuard + `
	RETURNING ` + opColumnsNoBody + `
), hist AS (
	` + recorded("up", "'unknown'", "up.state", "up.updated_at", "$5", "$6") + ` FROM up
)
SELECT ` + opColumns + ` FROM up`
	// probeAgainSQL ends an inconclusive probe's claim; it is due at $4.
	probeAgainSQL = `UPDATE idem_operations SET probe_token = NULL, probe_until = NULL, probe_next = $4
	` + probeGuard + `
	RETURNING ` + opColumnsNoBody
)

// ProbeResult implements ledger.Store.
func (s *Store) ProbeResult(ctx context.Context, l ledger.ProbeLease, o ledger.ProbeOutcome) (*ledger.Operation, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	actor := l.Actor
	if actor == "" {
		actor = ledger.ActorReconciler
	}
	var row pgx.Row
	if o.Verdict == ledger.Inconclusive {
		row = s.pool.QueryRow(ctx, probeAgainSQL, l.OpID, l.Token, l.Fence, o.Next)
	} else {
		status, headers, body, err := responseArgs(o.Response)
		if err != nil {
			return nil, err
		}
		row = s.pool.QueryRow(ctx, probeResolveSQL, l.OpID, l.Token, l.Fence, string(o.Verdict.Target()), actor,
			o.Evidence, status, headers, body, nullable(o.Response.SHA256()), nullable(o.ResultRef))
	}
	op, err := scanOp(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, s.probeRefused(ctx, l)
	}
	if err == nil && o.Response != nil {
		op.Response = o.Response
	}
	return op, mapErr("probe result", err)
}

// probeRefused says why a probe's result was refused: the operation left
// unknown, or a later claim fenced this one.
func (s *Store) probeRefused(ctx context.Context, l ledger.ProbeLease) error {
	op, err := s.Get(ctx, l.OpID)
	switch {
	case err != nil:
		return err
	case op.State != ledger.Unknown:
		return fmt.Errorf("probe result: %w: the operation is %s now", ledger.ErrIllegalTransition, op.State)
	}
	return fmt.Errorf("probe result: %w: a later probe claimed it", ledger.ErrStaleOwner)
}
