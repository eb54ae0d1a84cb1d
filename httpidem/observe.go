package httpidem

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Observer hears how each keyed request ended, what its upstream call
// took, and the failures the response cannot carry: the metrics' source.
// Its methods are on the request's path and must not block.
type Observer interface {
	Request(o Observation)
	// Upstream is one call of the handler (the upstream): the status it
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

// Observation is one keyed request as it ended. Every field is bounded:
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

// announce tells the Observer, if it asks, the names of the routes.
func (m *Middleware) announce(routes []*route) {
	ro, ok := m.opts.Observer.(RouteObserver)
	if !ok {
		return
	}
	names := make([]string, 0, len(routes))
	for _, rt := range routes {
		names = append(names, rt.name)
	}
	ro.Routes(names)
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

// observed is the response writer of an observed request: it keeps the
// status and the code answered.
type observed struct {
	http.ResponseWriter
	status int
	code   string
}

func (o *observed) WriteHeader(status int) {
	if o.status == 0 {
		o.status = status
	}
	o.ResponseWriter.WriteHeader(status)
}

func (o *observed) Write(b []byte) (int, error) {
	if o.status == 0 {
		o.status = http.StatusOK
	}
	return o.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (o *observed) Unwrap() http.ResponseWriter { return o.ResponseWriter }

// NoteCode keeps the code a problem or an acceptance answers with
// (contract.CodeNoter), and tells the writer it wraps, which may keep it
// too (an inbox consumer's in-process answer).
func (o *observed) NoteCode(code string) {
	o.code = code
	contract.NoteCode(o.ResponseWriter, code)
}

// observe tells the Observer how req ended.
func (m *Middleware) observe(req *request, w *observed, began time.Time) {
	o := Observation{Route: req.route.name, Tenant: req.tenant, Retry: req.retry, Created: req.created,
		Outcome: w.code, Duration: time.Since(began), Context: req.ctx, State: req.replayed}
	switch h := w.Header(); {
	case req.executed && req.created:
		o.Outcome = OutcomeCreated
	case req.executed:
		o.Outcome = OutcomeExecuted
	case h.Get(contract.HeaderReplayed) == "true" && h.Get(contract.HeaderDuplicateOf) != "":
		o.Outcome = OutcomeDuplicate
	case h.Get(contract.HeaderReplayed) == "true":
		o.Outcome = OutcomeReplayed
	case o.Outcome == "":
		o.Outcome = "http_" + strconv.Itoa(w.status)
	}
	m.opts.Observer.Request(o)
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
