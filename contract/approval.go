// Package contract is the wire contract idemgate's server and its clients
// share (docs/design.md, "Layout"): the bodies and codes both sides read, in one
// leaf package that imports only the ledger's types, so that a client
// (the agent, a drill) links none of the server's machinery. It starts
// with approvals; the rest of the contract is to move here.
package contract

import (
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// The approval codes (docs/design.md, "The HTTP contract"). Required and
// expired are not errors: the code of a 202 Accepted.
const (
	CodeApprovalRequired = "approval_required"
	CodeApprovalExpired  = "approval_expired"
	CodeApprovalDenied   = "approval_denied"
	// CodeApprovalMismatch: a decision echoed another fingerprint than the
	// approval's; CodeApprovalClosed: the approval is no longer pending
	// (decided, expired or used).
	CodeApprovalMismatch = "approval_mismatch"
	CodeApprovalClosed   = "approval_closed"
)

// Accepted is the 202 answer of an operation that waits for a human
// decision: nothing was forwarded, and the same request with the same key
// executes it once it is approved.
type Accepted struct {
	Code        string           `json:"code"` // CodeApprovalRequired or CodeApprovalExpired
	Detail      string           `json:"detail"`
	OperationID string           `json:"operation_id"`
	State       ledger.State     `json:"state"`
	StatusURL   string           `json:"status_url,omitempty"`
	Approval    AcceptedApproval `json:"approval"`
}

// AcceptedApproval is the approval an Accepted answer waits for, with
// the fingerprint a decision echoes (Decision): a client that asks a
// human, or decides through the API, needs no read of the approval first.
type AcceptedApproval struct {
	ID          string                `json:"id"`
	Status      ledger.ApprovalStatus `json:"status"`
	ExpiresAt   time.Time             `json:"expires_at"`
	Summary     string                `json:"summary"`
	Fingerprint string                `json:"fingerprint,omitempty"`
	URL         string                `json:"url,omitempty"`
}

// Decision is the body of POST …/approvals/{id}/approve and …/deny: the
// decider echoes the fingerprint it was shown, so that a decision is never
// for another request than the one that waits.
type Decision struct {
	Fingerprint string `json:"fingerprint"`
	Note        string `json:"note"`
}
