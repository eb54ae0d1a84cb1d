package keyed

import (
	"context"
	"errors"
	"net"
	"os"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Effect performs a command's effect, once, under the lease run holds
// (heartbeats extend it meanwhile). It returns what the effect answered
// and what that means for the operation; or an error when it got no
// answer: NotSent when nothing left for the effect's target (the
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

// ErrNotSent marks an effect's error that sent nothing: the connection
// was refused, the name did not resolve, no session could be had. It is
// the one error that releases an operation.
var ErrNotSent = errors.New("nothing was sent")

// NotSent wraps err as an effect's error that sent nothing to surface's
// target ("upstream", "mcp", "target": the history's code is
// "<surface>_unreachable").
func NotSent(surface string, err error) error {
	return &effectError{surface: surface, err: err, notSent: true}
}

// NoAnswer wraps err as an effect's error after something may have
// reached surface's target: "<surface>_timeout" when it timed out,
// "<surface>_reset" otherwise.
func NoAnswer(surface string, err error) error { return &effectError{surface: surface, err: err} }

type effectError struct {
	surface string
	err     error
	notSent bool
}

func (e *effectError) Error() string { return e.err.Error() }
func (e *effectError) Unwrap() []error {
	if e.notSent {
		return []error{e.err, ErrNotSent}
	}
	return []error{e.err}
}

// Classify is the one rule of an effect that got no answer
// (docs/design.md, "Operation states"): nothing sent, released; sent and
// no answer, unknown. The code says which, and whether it timed out:
// "<surface>_unreachable", "<surface>_timeout", "<surface>_reset". The
// outbox's relay reads it too.
func Classify(err error) (fate contract.Fate, code string, timeout bool) {
	surface := surfaceOf(err)
	if errors.Is(err, ErrNotSent) {
		return contract.FateReleased, surface + "_unreachable", false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || isTimeout(err) {
		return contract.FateUnknown, surface + "_timeout", true
	}
	return contract.FateUnknown, surface + "_reset", false
}

// surfaceOf is the surface an effect's error names ("effect" for none).
func surfaceOf(err error) string {
	var e *effectError
	if errors.As(err, &e) && e.surface != "" {
		return e.surface
	}
	return "effect"
}

// targets are how a problem names each surface's target.
var targets = map[string]string{"upstream": "the upstream", "mcp": "the MCP server", "target": "the target"}

// targetOf is how a problem names the target of err's surface.
func targetOf(err error) string {
	if t, ok := targets[surfaceOf(err)]; ok {
		return t
	}
	return "the effect's target"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
