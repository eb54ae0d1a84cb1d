package contract

import (
	"errors"
	"strings"

	"github.com/idemgate/idemgate/ledger"
)

// Coded is an error that names its own problem code: a parser's refusal
// (the fingerprint package's: invalid_command, payload_too_large,
// unsupported_media_type), found anywhere in an error's chain. ProblemFor
// answers it with that code and the whole error's text.
type Coded interface {
	error
	ProblemCode() string
}

// ProblemFor maps an error to its problem: the one place where domain and
// parser errors meet HTTP statuses, for the data plane, the control plane
// and the web page alike (which only chooses its own titles).
func ProblemFor(err error) *Problem {
	var p *Problem
	var coded Coded
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &coded):
		return NewProblem(coded.ProblemCode(), err.Error())
	}
	return ledgerProblem(err)
}

// ledgerProblem maps the ledger's errors (docs/design.md's problem table).
func ledgerProblem(err error) *Problem {
	switch {
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
		p := NewProblem(CodeStoreUnavailable, "the idempotency store cannot be reached or cannot write; nothing was "+
			"forwarded, retry with the same key")
		p.RetryAfter = 1
		return p
	case errors.Is(err, ledger.ErrStaleOwner):
		// Before illegal transition: a lapsed lease is both, and what its
		// owner must hear is that it no longer owns the operation.
		return NewProblem(CodeLeaseLost, "this token and fence no longer hold the operation's lease (another owner "+
			"took it, or it lapsed and the operation is unknown); nothing was changed")
	case errors.Is(err, ledger.ErrIllegalTransition):
		return NewProblem(CodeIllegalTransition, "the operation's state does not allow this")
	case errors.Is(err, ledger.ErrInvalid):
		return NewProblem(CodeInvalidCommand, err.Error())
	}
	return NewProblem(CodeInternal, "internal error")
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
