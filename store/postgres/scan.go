package postgres

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/ledger"
)

// opColumns is the column list every statement returns, in scanOp's order.
const opColumns = `id, tenant, key, route, fingerprint, state, attempts, fence, lease_until,
	business_key, concurrency_key, approval_id, approval_status, approval_expires_at,
	response_status, response_headers, response_body, result_ref, last_error,
	created_at, updated_at, expires_at, principal, target, run_id, trace_id, response_sha256, probe, namespace, kind,
	fingerprint_rules`

// opColumnsNoBody returns the same columns without the stored response's
// headers and body, for statements that wrote them and need not read them
// back (up to a MiB that would cross the wire twice).
var opColumnsNoBody = strings.Replace(opColumns, "response_headers, response_body",
	"NULL::bytea AS response_headers, NULL::bytea AS response_body", 1)

func scanOp(row pgx.Row) (*ledger.Operation, error) {
	var (
		op                          ledger.Operation
		state, kind                 string
		leaseUntil, approvalExpires *time.Time
		businessKey, concurrencyKey *string
		approvalID, approvalStatus  *string
		respStatus                  *int32
		respHeaders, respBody       []byte
		resultRef, lastError        *string
		principal, target, runID    *string
		traceID, sum, probe, rules  *string
	)
	err := row.Scan(&op.ID, &op.Tenant, &op.Key, &op.Route, &op.Fingerprint, &state, &op.Attempts, &op.Fence,
		&leaseUntil, &businessKey, &concurrencyKey, &approvalID, &approvalStatus, &approvalExpires,
		&respStatus, &respHeaders, &respBody, &resultRef, &lastError,
		&op.CreatedAt, &op.UpdatedAt, &op.ExpiresAt, &principal, &target, &runID, &traceID, &sum, &probe,
		&op.Namespace, &kind, &rules)
	if err != nil {
		return nil, err
	}
	op.State, op.Kind = ledger.State(state), ledger.Kind(kind)
	op.LeaseUntil = deref(leaseUntil)
	op.BusinessKey, op.ConcurrencyKey = deref(businessKey), deref(concurrencyKey)
	op.ResultRef, op.LastError = deref(resultRef), deref(lastError)
	op.Principal, op.Target, op.RunID, op.TraceID = deref(principal), deref(target), deref(runID), deref(traceID)
	op.ResponseSHA256, op.Probe, op.FingerprintRules = deref(sum), deref(probe), deref(rules)
	if approvalID != nil {
		op.Approval = &ledger.ApprovalRef{ID: *approvalID, Status: ledger.ApprovalStatus(deref(approvalStatus)),
			ExpiresAt: deref(approvalExpires)}
	}
	if respStatus != nil {
		op.Response = &ledger.Response{Status: int(*respStatus), Body: respBody}
		if len(respHeaders) > 0 {
			if err := json.Unmarshal(respHeaders, &op.Response.Header); err != nil {
				return nil, fmt.Errorf("operation %s: stored headers: %w", op.ID, err)
			}
		}
	}
	return &op, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// nullable turns Go's empty value into SQL NULL.
func nullable[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// responseArgs splits a response into its three columns; nil stores NULLs.
func responseArgs(r *ledger.Response) (status *int32, headers, body []byte, err error) {
	if r == nil {
		return nil, nil, nil, nil
	}
	st := int32(r.Status)
	if len(r.Header) > 0 {
		if headers, err = json.Marshal(http.Header(r.Header)); err != nil {
			return nil, nil, nil, fmt.Errorf("encode headers: %w", err)
		}
	}
	body = r.Body
	if body == nil {
		body = []byte{}
	}
	return &st, headers, body, nil
}

// micros is how durations travel to SQL: whole microseconds, PostgreSQL's
// timestamp resolution.
func micros(d time.Duration) int64 { return d.Microseconds() }
