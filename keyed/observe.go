package keyed

import (
	"context"
	"strings"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Observer hears how each keyed command ended, what its upstream call
// took, and the failures the response cannot carry: the metrics' source.
// Its methods are on the request's path and must not block.
type Observer interface {
	Request(o Observation)
	// Upstream is one call of the effect (the upstream): the status it
	// answered (0 when it answered nothing) and how long it took.
	Upstream(route string, status int, d time.Duration)
	// Failure is an owner step refused for a stale lease (FailureFenced) or
	// a store that failed (FailureStore).
	Failure(kind string)
}

// The failures an Observer hears.
const (
	FailureFenced = "fencing_rejected"
	FailureStore  = "store_error"
)

// Observation is one keyed command as it ended. Every field is bounded:
// the route template, never a key or an operation id.
type Observation struct {
	Route, Tenant string
	// Outcome is what the request got: OutcomeCreated (a new operation, run),
	// OutcomeExecuted (an existing one run: after a release, an approval, a
	// re-send), OutcomeReplayed, OutcomeDuplicate (another key's answer by
	// business identity), or the problem (or accepted) code it was answered.
	Outcome string
	// Created says this request created its operation, whatever became of
	// it: run at once, or waiting for an approval (Outcome
	// approval_required), run later by a retry that is OutcomeExecuted.
	// An operation is created once, so counting these counts operations.
	Created bool
	// Retry is "" for a request whose key was new, and for one whose key
	// was used with another request (a conflict: another request, not a
	// retry of that one); for a retry, what it met: RetryReplay,
	// in_progress, outcome_unknown, approval, or the family of the refusal
	// that released its operation (rate_limited, …).
	Retry    string
	Duration time.Duration
	// Context is the request's (traces annotate its span from it), and
	// State the state of the operation a replay from memory answered
	// ("" otherwise: the store's steps said it). Neither is a label.
	Context context.Context
	State   ledger.State
}

// A RouteObserver is an Observer that wants the names of the routes it
// will hear of (Observation.Route) before their first request, so that
// its series exist, at zero, from the start. New tells it.
type RouteObserver interface {
	Observer
	Routes(names []string)
}

// Announce tells the Observer, if it asks (RouteObserver), the names of
// the policies it will hear of: an adapter calls it once its routes,
// tools or consumers are known.
func (x *Executor) Announce(names []string) {
	if ro, ok := x.opts.Observer.(RouteObserver); ok {
		ro.Routes(names)
	}
}

// The outcomes that are not problem codes, and the retry families that
// are not errors.
const (
	OutcomeCreated   = "created"
	OutcomeExecuted  = "executed"
	OutcomeReplayed  = "replayed"
	OutcomeDuplicate = "duplicate"
	RetryReplay      = "replay"
	RetryApproval    = "approval"
)

// observe tells the Observer how e ended.
func (x *Executor) observe(e *exec, res *Result, began time.Time) {
	o := Observation{Route: e.Policy.Name, Tenant: e.Tenant, Retry: e.retry, Created: e.created,
		Outcome: res.Code(), Duration: time.Since(began), Context: e.ctx, State: e.replayedState}
	switch {
	case e.ran && e.created:
		o.Outcome = OutcomeCreated
	case e.ran:
		o.Outcome = OutcomeExecuted
	case res.Replayed && res.Duplicate:
		o.Outcome = OutcomeDuplicate
	case res.Replayed:
		o.Outcome = OutcomeReplayed
	case o.Outcome == "":
		o.Outcome = "answered"
	}
	x.opts.Observer.Request(o)
}

// retryOf names what a retry met: its operation as it stood.
func retryOf(op *ledger.Operation) string {
	switch op.State {
	case ledger.Succeeded, ledger.Failed:
		return RetryReplay
	case ledger.Executing:
		return contract.CodeInProgress
	case ledger.Unknown:
		return contract.CodeOutcomeUnknown
	}
	if op.Approval != nil && op.LastError == "" {
		return RetryApproval
	}
	return releasedFamily(op.LastError)
}

// releasedFamily names why an operation was released, by family.
func releasedFamily(code string) string {
	switch code {
	case "http_429":
		return contract.CodeRateLimited
	case "http_408":
		return "upstream_timeout"
	case "http_425":
		return "too_early"
	case "http_409":
		return "upstream_conflict"
	case "":
		return "released"
	}
	if strings.HasPrefix(code, "http_") {
		return "upstream_not_applied"
	}
	return code
}
