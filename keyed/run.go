package keyed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Run is an operation its command owns, while its effect runs.
type Run struct {
	x        *Executor
	op       *ledger.Operation
	key      string
	hb       *heartbeater
	approved bool
}

// OperationID is the id of the operation being run.
func (r *Run) OperationID() string { return r.op.ID }

// Key is the operation's key (to hand on to a target that honours it:
// ledger.UpstreamKey names its tenant and namespace too).
func (r *Run) Key() string { return r.key }

// Operation is the operation as it was taken: its tenant, namespace,
// kind and route.
func (r *Run) Operation() *ledger.Operation { return r.op }

// Lease is the lease held now (heartbeats extend it): for an effect that
// completes the operation in its own transaction (Outcome.InTx).
func (r *Run) Lease() ledger.Lease { return r.hb.current() }

// Approved is the headers of the request an approver saw, when this run
// follows an approval (nil otherwise): an approved run sends what was
// approved (docs/design.md, "Approvals"). It is read from the store only
// when asked.
func (r *Run) Approved(ctx context.Context) (map[string][]string, error) {
	if !r.approved || r.op.Approval == nil {
		return nil, nil
	}
	a, err := r.x.opts.Store.GetApproval(ctx, r.op.Approval.ID)
	if err != nil {
		return nil, err
	}
	return a.Headers, nil
}

// run runs an operation this command owns: its effect, or, with no
// effect, hands the lease to the caller, who performs the effect itself.
func (x *Executor) run(e *exec, r ledger.Reservation) Result {
	e.ran = true
	if e.effect == nil {
		res := Result{Op: r.Op, State: r.Op.State, Ran: true, Created: e.created, Lease: r.Lease}
		if e.created && r.Op.Attempts == 1 && r.Op.State == ledger.Executing {
			res.History = []ledger.Event{{OpID: r.Op.ID, From: ledger.None, To: ledger.Executing, At: r.Op.CreatedAt,
				Actor: x.opts.Actor, Reason: ledger.ReasonReserveWithLease}}
		}
		return res
	}
	defer x.waiters.signal(r.Op.ID)
	ctx := context.WithoutCancel(e.ctx)
	run := &Run{x: x, op: r.Op, key: e.Key, approved: r.Op.Approval != nil}
	run.hb = x.heartbeat(ctx, *r.Lease, e.Policy.lease())
	defer run.hb.stop()
	out, err := x.perform(ctx, run, e.effect)
	lease := run.hb.stop()
	rctx, cancel := context.WithTimeout(ctx, x.opts.RecordDeadline)
	defer cancel()
	if err != nil {
		return x.noAnswer(rctx, e, lease, err)
	}
	if out.InTx {
		if op, gerr := x.opts.Store.Get(rctx, lease.OpID); gerr == nil && op.State.Final() {
			x.cache.put(op)
			x.recorded(op)
			return Result{Op: op, State: op.State, Ran: true, Created: e.created, Answer: out.Answer}
		}
	}
	res := x.finish(rctx, e, lease, out, run.hb.away.Load())
	res.Ran, res.Created = true, e.created
	return res
}

// perform calls the effect; a panic leaves the operation unknown (the
// effect may have done anything before it) and goes on up.
func (x *Executor) perform(ctx context.Context, run *Run, effect Effect) (out Outcome, err error) {
	defer func() {
		if p := recover(); p != nil {
			x.leave(ctx, run.hb.stop(), "effect_panic", "the effect panicked", true)
			panic(p)
		}
	}()
	began := time.Now()
	out, err = effect(ctx, run)
	if x.opts.Observer != nil {
		status := 0
		if out.Answer != nil {
			status = out.Answer.Status
		}
		x.opts.Observer.Upstream(run.op.Route, status, time.Since(began))
	}
	return out, err
}

// noAnswer records an effect that got no answer by the one rule
// (Classify): nothing sent, released; sent, unknown. Its caller is told
// so, linked to the operation.
func (x *Executor) noAnswer(ctx context.Context, e *exec, lease ledger.Lease, err error) Result {
	fate, code, timeout := contract.ClassifyFailure(err)
	// The adapter logs what failed: an effect's error may quote the
	// request (a URL with its query), which the executor never logs.
	x.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "effect got no answer", slog.String("code", code),
		slog.String("operation_id", lease.OpID))
	op := &ledger.Operation{ID: lease.OpID, State: ledger.Prepared}
	var p *contract.Problem
	if fate == contract.FateReleased {
		x.leave(ctx, lease, code, "nothing was sent: "+code, false)
		p = contract.NewProblem(contract.CodeUpstreamUnavailable, contract.TargetOf(err)+" could not be reached and nothing "+
			"was sent; retry with the same key")
		p.RetryAfter = 1
	} else {
		op.State = ledger.Unknown
		x.leave(ctx, lease, code, "sent, and no answer came: "+code, true)
		status := http.StatusBadGateway
		if timeout {
			status = http.StatusGatewayTimeout
		}
		p = contract.NewProblem(contract.CodeOutcomeUnknown, "the request reached "+contract.TargetOf(err)+" and its answer "+
			"was lost ("+code+"): it may have been applied, and will not be re-sent").WithStatus(status)
	}
	return Result{Problem: p.For(op, x.opts.StatusBase), Op: op, State: op.State, Ran: true, Created: e.created}
}

// finish records the outcome, then answers. A store that is briefly
// unavailable is retried while the answer is held; only once the
// recording deadline has passed does the caller get an answer the store
// does not have (the effect happened either way). A completion refused
// because another step moved the operation meanwhile answers as the
// operation stands: the caller hears what its retries will.
func (x *Executor) finish(ctx context.Context, e *exec, lease ledger.Lease, out Outcome, away bool) Result {
	given := out.Answer
	if given == nil {
		given = &ledger.Response{Status: http.StatusOK}
	}
	stored, notStored := x.storable(e, out, given)
	done, err := x.record(ctx, e.Policy, lease, away, x.outcomeStep(out, stored))
	switch {
	case err == nil:
		x.cache.put(done)
		x.recorded(done)
		return Result{Op: done, State: done.State, Answer: given, Streamed: out.Streamed, NotStored: notStored}
	case errors.Is(err, ledger.ErrUnavailable):
		// Past the deadline: the effect happened and this caller deserves
		// its answer; the operation stays executing, and its lease will
		// make it unknown.
		x.unrecorded(ctx, e, lease.OpID, given, out.ResultRef, err, "answered, not recorded: the store failed")
		op := &ledger.Operation{ID: lease.OpID, State: ledger.Executing}
		return Result{Op: op, Answer: given, Streamed: out.Streamed, Unrecorded: true, NotStored: notStored}
	}
	return x.overtaken(ctx, e, out, given, lease.OpID, err)
}

// storable is what the operation keeps of an answer: the answer, or,
// past the policy's MaxAnswer (or when it was streamed), a stand-in that
// names it (docs/design.md, "An answer too large to keep").
func (x *Executor) storable(e *exec, out Outcome, given *ledger.Response) (*ledger.Response, bool) {
	switch {
	case out.Streamed:
		return standIn(given, out.Size, out.SHA256, e.Policy.MaxAnswer), true
	case e.Policy.MaxAnswer > 0 && int64(len(given.Body)) > e.Policy.MaxAnswer:
		return standIn(given, int64(len(given.Body)), given.SHA256(), e.Policy.MaxAnswer), true
	}
	return given, false
}

// overtaken answers for an operation whose owner's step was refused
// because another step moved it first (an expiry, an operator's
// resolution, a re-send): as it stands, what a retry would hear. An
// expiry that said what this owner would have (unknown) leaves the
// owner's own answer standing; any other answer is not the store's, and
// is logged as unrecorded.
func (x *Executor) overtaken(ctx context.Context, e *exec, out Outcome, given *ledger.Response, opID string,
	err error) Result {
	op, gerr := x.opts.Store.Get(ctx, opID)
	if gerr == nil && op.State == ledger.Unknown && out.Fate == contract.FateUnknown {
		return Result{Op: op, State: op.State, Answer: given, Streamed: out.Streamed}
	}
	x.unrecorded(ctx, e, opID, given, out.ResultRef, err, "not recorded: another step moved the operation; "+
		"the caller was answered as it stands")
	res := x.asItStands(op, gerr)
	res.Streamed = out.Streamed
	return res
}

// asItStands answers for op as read (err: it could not be): its stored
// answer once final, else the problem its state means, as a retry would
// hear.
func (x *Executor) asItStands(op *ledger.Operation, err error) Result {
	switch {
	case err != nil:
		return x.refused(contract.ProblemFor(err), nil)
	case op.State.Final():
		x.cache.put(op)
		return x.replay(op)
	case op.State == ledger.Unknown:
		return x.refused(contract.NewProblem(contract.CodeOutcomeUnknown, "the operation's lease lapsed before this "+
			"attempt's outcome could be recorded: its outcome is unknown, and it will not be re-sent; check the status "+
			"resource").WithStatus(http.StatusBadGateway), op)
	}
	return x.refused(inProgress("another attempt holds this operation now; retry with the same key"), op)
}

// outcomeStep is the owner step that records out: a completion (which
// may settle the operation after a lapse the store's absence caused), a
// release, or a move to unknown.
func (x *Executor) outcomeStep(out Outcome, stored *ledger.Response) func(context.Context, ledger.Lease, bool) (*ledger.Operation, error) {
	code := out.Code
	if code == "" && out.Answer != nil {
		code = fmt.Sprintf("http_%d", out.Answer.Status)
	}
	return func(ctx context.Context, l ledger.Lease, away bool) (*ledger.Operation, error) {
		switch out.Fate {
		case contract.FateSucceeded:
			return x.opts.Store.Complete(ctx, l, ledger.Outcome{State: ledger.Succeeded, Response: stored, Reason: code,
				ResultRef: out.ResultRef, AfterLapse: away})
		case contract.FateFailed:
			return x.opts.Store.Complete(ctx, l, ledger.Outcome{State: ledger.Failed, Response: stored,
				Reason: code, ErrorCode: code, AfterLapse: away})
		case contract.FateReleased:
			return x.opts.Store.Release(ctx, l, ledger.Note{Reason: "not applied: " + code, ErrorCode: code})
		}
		return x.opts.Store.MarkUnknown(ctx, l, ledger.Note{Reason: "answered " + code, ErrorCode: code})
	}
}

// record runs an owner step, and while the store is unavailable runs it
// again with backoff, its lease extended meanwhile, until ctx's deadline.
// An owner step is safe to repeat: one that committed but lost its reply
// is recognised as done. Once the store has been away (away: during the
// effect), the step may settle an operation whose lease lapsed meanwhile,
// if nobody has moved it since: the sweep of any instance may make it
// unknown the moment the store is back, before this owner's next try.
func (x *Executor) record(ctx context.Context, p *Policy, lease ledger.Lease, away bool,
	step func(context.Context, ledger.Lease, bool) (*ledger.Operation, error)) (*ledger.Operation, error) {
	op, err := step(ctx, lease, away)
	if !errors.Is(err, ledger.ErrUnavailable) {
		return op, err
	}
	hb := x.heartbeat(ctx, lease, p.lease())
	defer hb.stop()
	for wait := 20 * time.Millisecond; errors.Is(err, ledger.ErrUnavailable); wait = min(wait*2, time.Second) {
		x.log(ctx, "record outcome: store unavailable, retrying", lease.OpID, err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(jitter(wait)):
		}
		op, err = step(ctx, hb.current(), true)
	}
	return op, err
}

// leave marks the operation unknown (or releases it) when no outcome but
// that can be recorded.
func (x *Executor) leave(ctx context.Context, lease ledger.Lease, code, reason string, unknown bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.opts.RecordDeadline)
	defer cancel()
	var err error
	if unknown {
		_, err = x.opts.Store.MarkUnknown(ctx, lease, ledger.Note{Reason: reason, ErrorCode: code})
	} else {
		_, err = x.opts.Store.Release(ctx, lease, ledger.Note{Reason: reason, ErrorCode: code})
	}
	if err != nil {
		x.log(ctx, "record "+code, lease.OpID, err)
	}
}

// disown releases, in the background, a reservation whose reply was
// lost (p's id and token chosen by the command): if it committed, it is
// executing under a lease nobody will use, and would lapse into unknown
// although nothing was sent. The same reservation, repeated, is
// recognised and answered with its lease, which is then released; one
// that never committed is made now, and released too (the command was
// told to retry, and its retry finds it prepared and runs it). It gives
// up when the lease would have lapsed, or the store answers definitely.
func (x *Executor) disown(p ledger.ReserveParams) {
	deadline := time.Now().Add(p.Lease)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for wait := 50 * time.Millisecond; ctx.Err() == nil; wait = min(wait*2, 2*time.Second) {
		res, err := x.opts.Store.Reserve(ctx, p)
		if err == nil && res.Owned() && res.Op.ID == p.ID {
			_, err = x.opts.Store.Release(ctx, *res.Lease, ledger.Note{Reason: "the reservation's reply was lost: " +
				"nothing was sent", ErrorCode: "reserve_reply_lost"})
		}
		if err == nil || !errors.Is(err, ledger.ErrUnavailable) {
			if err != nil {
				x.log(ctx, "disown a reservation whose reply was lost", p.ID, err)
			}
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(jitter(wait)):
		}
	}
	x.log(ctx, "disown a reservation whose reply was lost: the store stayed away", p.ID, ctx.Err())
}
