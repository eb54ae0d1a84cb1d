package httpidem

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Recorder hears the audit events that record no transition: a replay, a
// conflict, a retry answered as its operation stands. The transitions'
// events are the store's, written with them. Record must not block long:
// it is on the request's path (ledger.EventBatcher only queues).
type Recorder interface {
	Record(e audit.Event)
}

func (m *Middleware) problem(w http.ResponseWriter, p *contract.Problem, op *ledger.Operation) {
	p.For(op, m.opts.StatusBase).Write(w)
}

// reserveFailed logs a reservation the store could not make (its refusals,
// a mismatch or a lock, are answers, not failures), with the operation id
// when there is one.
func (m *Middleware) reserveFailed(ctx context.Context, err error, op *ledger.Operation) {
	for _, answer := range []error{ledger.ErrFingerprintMismatch, ledger.ErrConcurrencyLocked, ledger.ErrInvalid} {
		if errors.Is(err, answer) {
			return
		}
	}
	id := ""
	if op != nil {
		id = op.ID
	}
	m.log(ctx, "reserve", id, err)
}

// log reports a store failure that the response cannot carry.
func (m *Middleware) log(ctx context.Context, msg string, op string, err error) {
	m.failed(err)
	attrs := []slog.Attr{slog.String("error", err.Error())}
	if op != "" {
		attrs = append(attrs, slog.String("operation_id", op))
	}
	m.opts.Logger.LogAttrs(ctx, slog.LevelError, msg, attrs...)
}

// noteRefusal records a reservation's refusal that is an answer: a
// conflict (the key's operation has another fingerprint) or a lock.
func (m *Middleware) noteRefusal(req *request, err error, op *ledger.Operation) {
	switch {
	case op == nil:
	case errors.Is(err, ledger.ErrFingerprintMismatch):
		m.note(req, audit.Conflict, op, "the key's operation has fingerprint "+op.Fingerprint)
	case errors.Is(err, ledger.ErrConcurrencyLocked):
		m.note(req, audit.Locked, op, "concurrency group held by "+op.ID)
	}
}

// note records an event of req that is no transition, when a Recorder
// listens: op is the operation it was answered from, if any.
func (m *Middleware) note(req *request, kind audit.Kind, op *ledger.Operation, reason string) {
	if m.opts.Audit == nil || req == nil || req.key == "" {
		return
	}
	e := audit.Event{At: time.Now(), Tenant: req.tenant, Kind: kind, Principal: req.who, RunID: req.run,
		TraceID: req.trace, Namespace: req.namespace, Key: req.key, Fingerprint: req.fingerprint,
		Route: req.route.name, Target: req.target, Actor: m.opts.Actor, Reason: reason}
	if op != nil {
		e.OperationID = op.ID
	}
	if op != nil && (kind == audit.Replayed || kind == audit.Duplicate) && op.State.Final() {
		// The answer given: the stored one, named, never held.
		e.ResultRef, e.ResponseSHA256 = op.ResultRef, op.ResponseSHA256
		if op.Response != nil {
			e.UpstreamStatus = op.Response.Status
		}
	}
	m.opts.Audit.Record(e)
}

// noteUnrecorded records an upstream answer the store could not record:
// the effect may have happened, and this is the log's word of it, the
// answer named by its status, reference and hash (what an operator who
// resolves the operation can match); reason says what the client was
// answered.
func (m *Middleware) noteUnrecorded(req *request, opID string, resp *ledger.Response, ref, reason string) {
	if m.opts.Audit == nil {
		return
	}
	e := audit.Event{At: time.Now(), Tenant: req.tenant, OperationID: opID, Kind: audit.AnswerUnrecorded,
		Principal: req.who, RunID: req.run, TraceID: req.trace, Namespace: req.namespace, Key: req.key,
		Fingerprint: req.fingerprint, Route: req.route.name, Target: req.target, Actor: m.opts.Actor,
		UpstreamStatus: resp.Status, ResultRef: ref, ResponseSHA256: resp.SHA256(), Reason: reason}
	m.opts.Audit.Record(e)
}

// failed tells the Observer of a store failure the response cannot carry.
func (m *Middleware) failed(err error) {
	if m.opts.Observer == nil {
		return
	}
	switch {
	case errors.Is(err, ledger.ErrStaleOwner):
		m.opts.Observer.Failure(FailureFenced)
	case errors.Is(err, ledger.ErrUnavailable):
		m.opts.Observer.Failure(FailureStore)
	}
}
