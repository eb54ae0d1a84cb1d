package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemgate/idemgate/ledger"
)

// claimProbesSQL claims the due unknown operations of the routes (?3, a
// JSON array), oldest due first: a new token (?1 and the id) and fence,
// a lease of ?2 microseconds. The state is untouched: a claim is no
// transition.
var claimProbesSQL = `UPDATE idem_operations SET probe_token = ?1 || id, probe_fence = probe_fence + 1,
	probe_until = ` + nowUS + ` + ?2, probes = probes + 1
WHERE id IN (SELECT id FROM idem_operations
	WHERE state = 'unknown' AND route IN (SELECT value FROM json_each(?3))
		AND coalesce(probe_next, 0) <= ` + nowUS + ` AND coalesce(probe_until, 0) < ` + nowUS + `
	ORDER BY coalesce(probe_next, 0), id LIMIT ?4)
RETURNING ` + opColumnsNoBody + `, probe_token, probe_fence, probe_until, probes`

// ClaimProbes implements ledger.Store.
func (s *Store) ClaimProbes(ctx context.Context, p ledger.ProbeClaimParams) ([]ledger.ProbeClaim, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	routes, err := json.Marshal(p.Routes)
	if err != nil {
		return nil, fmt.Errorf("claim probes: %w", err)
	}
	prefix := ledger.NewToken() + ":"
	return step(s, ctx, durable, func(ctx context.Context, d driver) ([]ledger.ProbeClaim, error) {
		var out []ledger.ProbeClaim
		err := eachRow(ctx, d.q, claimProbesSQL, []any{prefix, p.Lease.Microseconds(), string(routes), p.Limit},
			func(r *sql.Rows) error {
				var c ledger.ProbeClaim
				var until int64
				op, err := scanOp(scanExtra4{r, []any{&c.Lease.Token, &c.Lease.Fence, &until, &c.Lease.Probes}})
				if err != nil {
					return err
				}
				c.Op, c.Lease.OpID, c.Lease.Until, c.Lease.Actor = op, op.ID, fromMicro(until), ledger.ActorReconciler
				out = append(out, c)
				return nil
			})
		return out, mapErr("claim probes", err)
	})
}

// scanExtra4 scans the operation columns followed by several more.
type scanExtra4 struct {
	row   interface{ Scan(...any) error }
	extra []any
}

func (r scanExtra4) Scan(dest ...any) error { return r.row.Scan(append(dest, r.extra...)...) }

// probeGuard is a probe result's guard: still unknown, still this claim.
const probeGuard = `WHERE id = ?1 AND state = 'unknown' AND probe_token = ?2 AND probe_fence = ?3`

var (
	// probeResolveSQL moves the operation on a probe's proof; the update
	// trigger writes its history and audit event (resolved).
	probeResolveSQL = `UPDATE idem_operations SET state = ?4, updated_at = ` + nowUS + `,
	expires_at = ` + nowUS + ` + retention_us, last_actor = ?5, last_reason = ?6, response_status = ?7,
	response_headers = ?8, response_body = ?9, response_sha256 = ?10, result_ref = coalesce(?11, result_ref),
	last_error = CASE WHEN ?4 = 'prepared' THEN 'reconciled_not_applied' ELSE last_error END,
	probe_token = NULL, probe_until = NULL, probe_next = NULL
` + probeGuard + `
RETURNING ` + opColumnsNoBody
	// probeAgainSQL ends an inconclusive probe's claim; it is due at ?4.
	probeAgainSQL = `UPDATE idem_operations SET probe_token = NULL, probe_until = NULL, probe_next = ?4
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
	status, headers, body, err := responseArgs(o.Response)
	if err != nil {
		return nil, err
	}
	return step(s, ctx, durable, func(ctx context.Context, d driver) (*ledger.Operation, error) {
		var op *ledger.Operation
		var err error
		if o.Verdict == ledger.Inconclusive {
			op, err = scanOp(queryRow(ctx, d.q, probeAgainSQL, l.OpID, l.Token, l.Fence, o.Next.UnixMicro()))
		} else {
			op, err = scanOp(queryRow(ctx, d.q, probeResolveSQL, l.OpID, l.Token, l.Fence, string(o.Verdict.Target()),
				actor, o.Evidence, status, headers, body, null(o.Response.SHA256()), null(o.ResultRef)))
		}
		if errors.Is(err, errNoRows) {
			return nil, probeRefused(ctx, d, l)
		}
		if err == nil && o.Response != nil {
			op.Response = o.Response
		}
		return op, mapErr("probe result", err)
	})
}

// probeRefused says why a probe's result was refused: the operation left
// unknown, or a later claim fenced this one.
func probeRefused(ctx context.Context, d driver, l ledger.ProbeLease) error {
	op, err := d.Get(ctx, l.OpID)
	switch {
	case err != nil:
		return err
	case op.State != ledger.Unknown:
		return fmt.Errorf("probe result: %w: the operation is %s now", ledger.ErrIllegalTransition, op.State)
	}
	return fmt.Errorf("probe result: %w: a later probe claimed it", ledger.ErrStaleOwner)
}
