package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// opColumns is the column list every statement returns, in scanOp's order.
const opColumns = `id, tenant, key, route, fingerprint, state, attempts, fence, lease_until,
	business_key, concurrency_key, approval_id, approval_status, approval_expires_at,
	response_status, response_headers, response_body, result_ref, last_error,
	created_at, updated_at, expires_at, principal, target, run_id, trace_id, response_sha256, probe,
	namespace, kind, fingerprint_rules`

// The two lookups of one operation.
const (
	selectByIDSQL  = `SELECT ` + opColumns + ` FROM idem_operations WHERE id = ?`
	selectByKeySQL = `SELECT ` + opColumns + ` FROM idem_operations WHERE tenant = ? AND namespace = ? AND key = ?`
)

// opColumnsNoBody returns the same columns without the stored response's
// headers and body, for statements that wrote them and need not read them
// back.
var opColumnsNoBody = strings.Replace(opColumns, "response_headers, response_body",
	"NULL AS response_headers, NULL AS response_body", 1)

func scanOp(r row) (*ledger.Operation, error) {
	var (
		op                                      ledger.Operation
		state, kind                             string
		leaseUntil, approvalExpires, respStatus sql.NullInt64
		businessKey, concurrencyKey             sql.NullString
		approvalID, approvalStatus              sql.NullString
		resultRef, lastError                    sql.NullString
		respHeaders, respBody                   []byte
		created, updated, expires               int64
		principal, target, runID, traceID, sum  sql.NullString
		probe, rules                            sql.NullString
	)
	err := r.Scan(&op.ID, &op.Tenant, &op.Key, &op.Route, &op.Fingerprint, &state, &op.Attempts, &op.Fence,
		&leaseUntil, &businessKey, &concurrencyKey, &approvalID, &approvalStatus, &approvalExpires,
		&respStatus, &respHeaders, &respBody, &resultRef, &lastError, &created, &updated, &expires,
		&principal, &target, &runID, &traceID, &sum, &probe, &op.Namespace, &kind, &rules)
	if err != nil {
		return nil, err
	}
	op.State, op.Kind = ledger.State(state), ledger.Kind(kind)
	op.LeaseUntil = micro(leaseUntil)
	op.BusinessKey, op.ConcurrencyKey = businessKey.String, concurrencyKey.String
	op.ResultRef, op.LastError = resultRef.String, lastError.String
	op.Principal, op.Target, op.RunID, op.TraceID = principal.String, target.String, runID.String, traceID.String
	op.ResponseSHA256, op.Probe, op.FingerprintRules = sum.String, probe.String, rules.String
	op.CreatedAt, op.UpdatedAt, op.ExpiresAt = fromMicro(created), fromMicro(updated), fromMicro(expires)
	if approvalID.Valid {
		op.Approval = &ledger.ApprovalRef{ID: approvalID.String, Status: ledger.ApprovalStatus(approvalStatus.String),
			ExpiresAt: micro(approvalExpires)}
	}
	if respStatus.Valid {
		op.Response = &ledger.Response{Status: int(respStatus.Int64), Body: respBody}
		if op.Response.Body == nil {
			op.Response.Body = []byte{}
		}
		if len(respHeaders) > 0 {
			if err := json.Unmarshal(respHeaders, &op.Response.Header); err != nil {
				return nil, fmt.Errorf("operation %s: stored headers: %w", op.ID, err)
			}
		}
	}
	return &op, nil
}

func fromMicro(us int64) time.Time { return time.UnixMicro(us).UTC() }

func micro(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicro(v.Int64)
}

// null turns Go's empty string into SQL NULL.
func null(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// responseArgs splits a response into its three columns; nil stores NULLs.
func responseArgs(r *ledger.Response) (status, headers, body any, err error) {
	if r == nil {
		return nil, nil, nil, nil
	}
	if len(r.Header) > 0 {
		h, err := json.Marshal(http.Header(r.Header))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("encode headers: %w", err)
		}
		headers = h
	}
	b := r.Body
	if b == nil {
		b = []byte{}
	}
	return r.Status, headers, b, nil
}
