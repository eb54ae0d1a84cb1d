package keyed

import (
	"context"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Effect performs a command's effect, once, under the lease run holds
// (heartbeats extend it meanwhile). It returns what the effect answered
// and what that means for the operation; or an error when it got no
// answer: contract.NotSent when nothing left for the effect's target (the
// operation is released, and a retry runs it), anything else when
// something may have (unknown, never re-run unless the policy allows
// Resend). ctx is detached from the caller's: a caller that gives up must
// not cut an effect short and turn an answer its retry could replay into
// an unknown.
type Effect func(ctx context.Context, run *Run) (Outcome, error)

// Outcome is an effect's answer and its meaning for the operation.
type Outcome struct {
	// Fate is what the answer means: succeeded and failed are stored and
	// replayed; released (definitely not applied) lets a retry run it
	// again; unknown is never re-run.
	Fate contract.Fate
	// Code is a short code for the operation's history ("http_201",
	// "mcp_is_error"); never a message holding request data.
	Code string
	// Answer is what the effect answered: its body and media type, and
	// an HTTP answer's status and headers. It is stored (final fates) and
	// answered.
	Answer *ledger.Response
	// ResultRef is the target's reference for the effect, when known.
	ResultRef string
	// Streamed says the adapter could not hold the answer and has given
	// it to its caller already (an HTTP response larger than the limit, or
	// flushed): Answer holds its status and headers, Size and SHA256 the
	// body that went, and a stand-in is stored.
	Streamed bool
	Size     int64
	SHA256   string
	// InTx says the effect completed the operation itself, in the
	// transaction of its own business write (a Go service's handler with
	// the store bound to it), and committed: the executor then only reads
	// that the operation is final. If it did not commit, the operation is
	// still executing, and Fate is recorded as usual.
	InTx bool
}

// Result is how a command ended, for its adapter to answer in its own
// transport.
type Result struct {
	// Op is the operation the command was answered for (another key's on
	// a Duplicate); nil when none was reached.
	Op *ledger.Operation
	// State is that operation's state as this command left it ("" when
	// none was reached, or when its outcome could not be recorded:
	// Unrecorded).
	State ledger.State
	// Ran says this command ran the effect (or was granted the lease),
	// Created that it created the operation.
	Ran, Created bool
	// Answer is the effect's (Ran) or the stored one (Replayed). A
	// Replayed result with a nil Answer is an operation resolved without
	// the target's answer: the adapter says so.
	Answer *ledger.Response
	// Replayed says the operation was final before this command: nothing
	// was run, and Answer is the stored answer.
	Replayed bool
	// Duplicate says Op is another key's operation with the same business
	// identity, answered instead.
	Duplicate bool
	// Problem is a refusal, or what an effect that got no answer means
	// (released, unknown): nothing else is set but Op and State.
	Problem *contract.Problem
	// Accepted says the operation waits for a human decision.
	Accepted *contract.Accepted
	// Lease is the caller's to perform the effect itself, with the owner
	// steps (a command run with a nil Effect: an action).
	Lease *ledger.Lease
	// History is the operation's history when it is known without a
	// read: a lease granted by the reservation that created the
	// operation, whose one event the reservation wrote (nil otherwise).
	History []ledger.Event
	// Unrecorded says the store could not record the answer within the
	// recording deadline: the caller is given it, and the operation will
	// become unknown when its lease lapses.
	Unrecorded bool
	// Streamed says the adapter gave the answer already (Outcome.Streamed).
	Streamed bool
	// NotStored says the answer was over the policy's MaxAnswer: it is
	// given to this caller, and the operation keeps a stand-in.
	NotStored bool
}

// Code is the problem or acceptance code the result carries ("" for an
// answer).
func (r *Result) Code() string {
	switch {
	case r.Problem != nil:
		return r.Problem.Code
	case r.Accepted != nil:
		return r.Accepted.Code
	}
	return ""
}
