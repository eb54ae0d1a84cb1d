package keyed

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/ledger"
)

// Recorder hears the audit events that record no transition: a replay, a
// conflict, a retry answered as its operation stands. The transitions'
// events are the store's, written with them. Record must not block long:
// it is on the command's path (ledger.EventBatcher only queues).
type Recorder interface {
	Record(e audit.Event)
}

// reserveFailed logs a reservation the store could not make (its refusals,
// a mismatch or a lock, are answers, not failures), with the operation id
// when there is one.
func (x *Executor) reserveFailed(ctx context.Context, err error, op *ledger.Operation) {
	for _, answer := range []error{ledger.ErrFingerprintMismatch, ledger.ErrConcurrencyLocked, ledger.ErrInvalid} {
		if errors.Is(err, answer) {
			return
		}
	}
	id := ""
	if op != nil {
		id = op.ID
	}
	x.log(ctx, "reserve", id, err)
}

// log reports a store failure that the answer cannot carry.
func (x *Executor) log(ctx context.Context, msg string, op string, err error) {
	x.failed(err)
	attrs := []slog.Attr{slog.String("error", err.Error())}
	if op != "" {
		attrs = append(attrs, slog.String("operation_id", op))
	}
	x.opts.Logger.LogAttrs(ctx, slog.LevelError, msg, attrs...)
}

// noteRefusal records a reservation's refusal that is an answer: a
// conflict (the key's operation has another fingerprint) or a lock.
func (x *Executor) noteRefusal(e *exec, err error, op *ledger.Operation) {
	switch {
	case op == nil:
	case errors.Is(err, ledger.ErrFingerprintMismatch):
		x.note(e, audit.Conflict, op, "the key's operation has fingerprint "+op.Fingerprint)
	case errors.Is(err, ledger.ErrConcurrencyLocked):
		x.note(e, audit.Locked, op, "concurrency group held by "+op.ID)
	}
}

// event is an audit event of e that records no transition.
func (x *Executor) event(e *exec, kind audit.Kind, reason string) audit.Event {
	return audit.Event{At: time.Now(), Tenant: e.Tenant, Namespace: auditNamespace(e.Namespace), Kind: kind,
		Principal: e.Principal.Name, RunID: e.Run, TraceID: e.Trace, Key: e.Key, Fingerprint: e.Fingerprint,
		Route: e.Policy.Name, Target: e.Target, Actor: x.opts.Actor, Reason: reason}
}

// auditNamespace is the namespace an audit event names: none for the
// clients' own, so that their events read as they always did.
func auditNamespace(ns string) string {
	if ns == ledger.NamespaceClients {
		return ""
	}
	return ns
}

// note records an event of e that is no transition, when a Recorder
// listens: op is the operation it was answered from, if any.
func (x *Executor) note(e *exec, kind audit.Kind, op *ledger.Operation, reason string) {
	if x.opts.Audit == nil {
		return
	}
	ev := x.event(e, kind, reason)
	if op != nil {
		ev.OperationID = op.ID
	}
	if op != nil && (kind == audit.Replayed || kind == audit.Duplicate) && op.State.Final() {
		// The answer given: the stored one, named, never held.
		ev.ResultRef, ev.ResponseSHA256 = op.ResultRef, op.ResponseSHA256
		if op.Response != nil {
			ev.UpstreamStatus = op.Response.Status
		}
	}
	x.opts.Audit.Record(ev)
}

// unrecorded logs, and tells the audit log, of an answer the store does
// not hold: the effect may have happened, and this is the log's word of
// it, the answer named by its status, reference and hash (what an
// operator who resolves the operation can match); reason says what the
// caller was answered.
func (x *Executor) unrecorded(ctx context.Context, e *exec, opID string, resp *ledger.Response, ref string,
	err error, reason string) {
	x.log(ctx, "answer_unrecorded", opID, err)
	if x.opts.Audit == nil {
		return
	}
	ev := x.event(e, audit.AnswerUnrecorded, reason)
	ev.OperationID, ev.UpstreamStatus, ev.ResultRef, ev.ResponseSHA256 = opID, resp.Status, ref, resp.SHA256()
	x.opts.Audit.Record(ev)
}

// failed tells the Observer of a store failure the answer cannot carry.
func (x *Executor) failed(err error) {
	if x.opts.Observer == nil {
		return
	}
	switch {
	case errors.Is(err, ledger.ErrStaleOwner):
		x.opts.Observer.Failure(FailureFenced)
	case errors.Is(err, ledger.ErrUnavailable):
		x.opts.Observer.Failure(FailureStore)
	}
}

// recorded tells Recorded of a final operation.
func (x *Executor) recorded(op *ledger.Operation) {
	if x.opts.Recorded != nil && op != nil && op.State.Final() {
		x.opts.Recorded(op)
	}
}
