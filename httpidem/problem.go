// Package httpidem is the HTTP contract of idemgate (docs/design.md, "The HTTP
// contract") as net/http middleware: a Go service wraps its write handlers
// and gets keyed reservation, fingerprint binding, replay, in-progress and
// unknown answers, and problem responses. The gateway is built on it.
package httpidem

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/fingerprint"
	"github.com/idemgate/idemgate/ledger"
)

// Problem codes: package contract's, here for the middleware's users.
const (
	CodeMissingKey           = contract.CodeMissingKey
	CodeInvalidKey           = contract.CodeInvalidKey
	CodeInvalidCommand       = contract.CodeInvalidCommand
	CodeFingerprintMismatch  = contract.CodeFingerprintMismatch
	CodeInProgress           = contract.CodeInProgress
	CodeOutcomeUnknown       = contract.CodeOutcomeUnknown
	CodeConcurrencyLocked    = contract.CodeConcurrencyLocked
	CodeApprovalDenied       = contract.CodeApprovalDenied
	CodeApprovalRequired     = contract.CodeApprovalRequired
	CodeApprovalExpired      = contract.CodeApprovalExpired
	CodeApprovalMismatch     = contract.CodeApprovalMismatch
	CodeApprovalClosed       = contract.CodeApprovalClosed
	CodeUnauthorized         = contract.CodeUnauthorized
	CodeForbidden            = contract.CodeForbidden
	CodePayloadTooLarge      = contract.CodePayloadTooLarge
	CodeUpstreamUnavailable  = contract.CodeUpstreamUnavailable
	CodeStoreUnavailable     = contract.CodeStoreUnavailable
	CodeUnsupportedMediaType = contract.CodeUnsupportedMediaType
	CodeRateLimited          = contract.CodeRateLimited
	CodeInvalidRequest       = contract.CodeInvalidRequest
	CodeIllegalTransition    = contract.CodeIllegalTransition
	CodeNotFound             = contract.CodeNotFound
	CodeInternal             = contract.CodeInternal
)

// Problem is a problem the middleware sends: the wire body (package
// contract's) and how to send it.
type Problem struct {
	contract.Problem
	RetryAfter int `json:"-"` // seconds; sent as Retry-After when set
	// OtherOperation marks operation_id as another key's operation (a
	// concurrency holder): it is named in the body, and the
	// Idempotency-Operation header, which is this key's, is left out.
	OtherOperation bool `json:"-"`
}

// NewProblem returns the problem for code, with its status and title.
func NewProblem(code, detail string) *Problem {
	return &Problem{Problem: contract.NewProblem(code, detail)}
}

// Error makes a Problem an error.
func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

// For attaches an operation: its id, state and status resource.
func (p *Problem) For(op *ledger.Operation, statusBase string) *Problem {
	if op != nil {
		p.OperationID, p.State = op.ID, op.State
		if statusBase != "" {
			p.StatusURL = statusBase + "/operations/" + op.ID
		}
	}
	return p
}

// WithStatus overrides the status (outcome_unknown is 502 or 504 on the
// attempt that lost the answer, 409 on retries).
func (p *Problem) WithStatus(status int) *Problem {
	p.Status = status
	return p
}

// Write sends the problem.
func (p *Problem) Write(w http.ResponseWriter) {
	answered(w, p.Code)
	h := w.Header()
	h.Set("Content-Type", contract.MediaProblem)
	h.Set("Cache-Control", "no-store")
	if p.OperationID != "" && !p.OtherOperation {
		h.Set(HeaderOperation, p.OperationID)
	}
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// errText is what a domain error says after its step's prefix, or
// fallback: the ledger's own words (which name no request data) make a
// refusal actionable.
func errText(err error, fallback string) string {
	if err == nil {
		return fallback
	}
	msg := err.Error()
	if _, rest, ok := strings.Cut(msg, ": "); ok {
		return rest
	}
	return msg
}

// ProblemFor maps an error to its problem: the one place where domain and
// parser errors meet HTTP statuses.
func ProblemFor(err error) *Problem {
	var p *Problem
	var fe *fingerprint.Error
	switch {
	case errors.As(err, &p):
		return p
	case errors.Is(err, fingerprint.ErrTooLarge):
		return NewProblem(CodePayloadTooLarge, err.Error())
	case errors.Is(err, fingerprint.ErrUnsupportedMediaType):
		return NewProblem(CodeUnsupportedMediaType, err.Error())
	case errors.As(err, &fe):
		return NewProblem(CodeInvalidCommand, err.Error())
	case errors.Is(err, ledger.ErrFingerprintMismatch):
		return NewProblem(CodeFingerprintMismatch,
			"this Idempotency-Key was first used with a different request; use a new key for a new request")
	case errors.Is(err, ledger.ErrConcurrencyLocked):
		p := NewProblem(CodeConcurrencyLocked, "another live operation holds this route's concurrency group "+
			"(see operation_id); retry once it has ended")
		p.RetryAfter, p.OtherOperation = 1, true
		return p
	case errors.Is(err, ledger.ErrApprovalMismatch):
		return NewProblem(CodeApprovalMismatch, "the fingerprint decided on is not this approval's: the request "+
			"shown is not the one waiting; read the approval again")
	case errors.Is(err, ledger.ErrApprovalClosed):
		return NewProblem(CodeApprovalClosed, errText(err, "the approval is no longer pending"))
	case errors.Is(err, ledger.ErrForbidden):
		return NewProblem(CodeForbidden, errText(err, "not allowed"))
	case errors.Is(err, ledger.ErrNotFound):
		return NewProblem(CodeNotFound, "no such operation")
	case errors.Is(err, ledger.ErrUnavailable), errors.Is(err, ledger.ErrNoSchema):
		p := NewProblem(CodeStoreUnavailable, "the idempotency store cannot be reached or cannot write; nothing was forwarded, retry with the same key")
		p.RetryAfter = 1
		return p
	case errors.Is(err, ledger.ErrIllegalTransition):
		return NewProblem(CodeIllegalTransition, "the operation's state does not allow this")
	case errors.Is(err, ledger.ErrInvalid):
		return NewProblem(CodeInvalidCommand, err.Error())
	}
	return NewProblem(CodeInternal, "internal error")
}
