package contract

// The headers of the HTTP contract (docs/design.md, "The HTTP contract").
const (
	HeaderKey       = "Idempotency-Key"
	HeaderOperation = "Idempotency-Operation"
	HeaderReplayed  = "Idempotent-Replayed"
	HeaderPrefer    = "Prefer"
	// HeaderDuplicateOf names the operation whose answer a request with the
	// same business key (and another idempotency key) was given.
	HeaderDuplicateOf = "Idempotency-Duplicate-Of"
	// HeaderRun is the agent's own name for the run that sends a request
	// (an agent run id); the audit log records it with every event of the
	// request, to say which run sent what.
	HeaderRun = "Idempotency-Run"
	// HeaderTraceparent is W3C Trace Context's header; its trace id is
	// recorded in the audit log.
	HeaderTraceparent = "traceparent"
	// HeaderReconciled marks a replay whose answer a reconciliation probe
	// found: the original answer was lost, and this is the proof.
	HeaderReconciled = "Idempotency-Reconciled"
	// HeaderLockedBy names, on a concurrency_locked refusal, the operation
	// that holds the group (the problem's operation_id, which is not this
	// key's: Idempotency-Operation is left out).
	HeaderLockedBy = "Idempotency-Locked-By"
	// HeaderState and HeaderStatusURL carry a problem's state and
	// status_url, the state and status resource of the operation it names
	// (Idempotency-Operation, or Idempotency-Locked-By): whatever shape the
	// body has (docs/design.md, "Error shapes"), a client finds them here.
	HeaderState     = "Idempotency-Operation-State"
	HeaderStatusURL = "Idempotency-Status-URL"
	// HeaderUnrecorded marks an answer the store could not record within
	// the recording deadline (docs/design.md, "Durability"): the effect
	// happened, this client is its only witness, and the operation becomes
	// unknown when its lease lapses, so every retry is told
	// outcome_unknown until someone resolves it.
	HeaderUnrecorded = "Idempotency-Answer-Unrecorded"
)

// MaxRunLen bounds an Idempotency-Run value, as a key is bounded.
const MaxRunLen = 255

// Problem codes: docs/design.md's table, plus store_unavailable, invalid_request,
// illegal_transition, not_found and internal.
const (
	CodeMissingKey          = "missing_key"
	CodeInvalidKey          = "invalid_key"
	CodeInvalidCommand      = "invalid_command"
	CodeFingerprintMismatch = "fingerprint_mismatch"
	CodeInProgress          = "in_progress"
	CodeOutcomeUnknown      = "outcome_unknown"
	CodeConcurrencyLocked   = "concurrency_locked"
	CodeUnauthorized        = "unauthorized"
	CodeForbidden           = "forbidden"
	CodePayloadTooLarge     = "payload_too_large"
	CodeUpstreamUnavailable = "upstream_unavailable"
	// CodeStoreUnavailable: the ledger cannot be reached or cannot write;
	// nothing is reserved and nothing is forwarded, and the client may retry
	// with the same key.
	CodeStoreUnavailable     = "store_unavailable"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeRateLimited          = "rate_limited"
	// CodeInvalidRequest is a request the gateway will not forward as it
	// stands: a header name with '_', two Authorization headers, a dot
	// segment in the path, a query that does not parse.
	CodeInvalidRequest = "invalid_request"
	// CodeIllegalTransition is an action the operation's state does not
	// allow (resolving one that is not unknown).
	CodeIllegalTransition = "illegal_transition"
	CodeNotFound          = "not_found"
	CodeInternal          = "internal"
)
