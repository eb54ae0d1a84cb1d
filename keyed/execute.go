package keyed

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// exec is one command on its way through the executor: what it met, for
// its answer and its observation.
type exec struct {
	*Command
	ctx    context.Context
	effect Effect
	// retry is what the command met of an existing operation (retryOf);
	// created and ran what it did; reopened that it tried to open a new
	// approval, at most once.
	retry         string
	created, ran  bool
	reopened      bool
	replayedState ledger.State // the state a replay from memory answered
}

// Execute runs c: it reserves c's key and runs effect once under the
// lease, or answers from the operation the key already has (replayed,
// refused, waited for, run again once released or approved). A nil
// effect grants the lease to the caller instead (an action): Result.Lease.
// Execute returns only once the outcome is recorded (or could not be,
// Result.Unrecorded): nobody hears an answer its retry would not.
func (x *Executor) Execute(ctx context.Context, c *Command, effect Effect) (res Result, err error) {
	if err := c.check(); err != nil {
		return Result{}, err
	}
	if p := x.targetBound(c); p != nil {
		return Result{Problem: p}, nil
	}
	e := &exec{Command: c, ctx: ctx, effect: effect}
	if x.opts.Observer != nil {
		defer x.observe(e, &res, time.Now())
	}
	return x.execute(e), nil
}

func (x *Executor) execute(e *exec) Result {
	if op := x.cache.get(e.opKey()); op != nil {
		return x.cached(e, op)
	}
	if res, ok := x.retried(e); ok {
		return res
	}
	apr, p := x.approvalFor(e)
	if p == nil {
		p = x.commandBound(apr)
	}
	if p != nil {
		return Result{Problem: p}
	}
	settle, p := x.admit(e, apr)
	if p != nil {
		return Result{Problem: p}
	}
	var res Result
	defer func() { settle(e.created, res.Op == nil || !res.State.Final()) }()
	res = x.reserved(e, apr)
	return res
}

// reserved reserves e's key and goes on from what the store answered.
func (x *Executor) reserved(e *exec, apr *ledger.ApprovalRequest) Result {
	// Detached: a caller that leaves must not cut a reservation between
	// its commit and its reply, leaving an operation nobody owns.
	ctx, cancel := detached(e.ctx, recordTimeout)
	r, err := x.reserve(ctx, e, apr)
	cancel()
	e.created = err == nil && r.Created
	if errors.Is(err, ledger.ErrFingerprintMismatch) && r.Op != nil && e.sameCommand(r.Op) {
		return x.existing(e, r.Op) // made under other rules, the same command under them
	}
	switch {
	case err != nil:
		x.reserveFailed(ctx, err, r.Op)
		x.noteRefusal(e, err, r.Op)
		return x.refused(contract.ProblemFor(err), r.Op)
	case r.Owned():
		return x.run(e, r)
	case r.Created: // prepared, waiting for its approval
		if apr != nil {
			x.summaries.put(apr.ID, apr.Summary)
		}
		return x.approved(e, r.Op)
	case r.Duplicate:
		x.note(e, audit.Duplicate, r.Op, "a new key for the business identity of "+r.Op.ID)
		return x.duplicate(e, r.Op)
	}
	return x.existing(e, r.Op)
}

// recordTimeout bounds a reservation or an acquisition.
const recordTimeout = 30 * time.Second

// reserveRetry bounds how long a reservation whose reply was lost is
// repeated: long enough for a pool to replace a lost connection.
const reserveRetry = 500 * time.Millisecond

// reserve reserves e's operation. When the store's reply is lost (the
// reservation may have committed) it repeats the very same reservation,
// its id and token chosen here: one that committed is then recognised as
// this command's, instead of being left executing with nobody to run it.
// If the store stays away, the reservation is disowned in the background
// (disown): nothing was sent, and its retry must be able to run it.
func (x *Executor) reserve(ctx context.Context, e *exec, apr *ledger.ApprovalRequest) (ledger.Reservation, error) {
	p := x.reserveParams(e.Command)
	if apr != nil {
		p.Lease, p.Approval = 0, apr
	}
	p.ID, p.Token = ledger.NewID(), ledger.NewToken()
	res, err := x.opts.Store.Reserve(ctx, p)
	deadline := time.Now().Add(reserveRetry)
	for wait := 10 * time.Millisecond; errors.Is(err, ledger.ErrReplyLost) && time.Now().Before(deadline); wait *= 2 {
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(jitter(wait)):
		}
		res, err = x.opts.Store.Reserve(ctx, p)
	}
	if errors.Is(err, ledger.ErrReplyLost) && p.Lease > 0 {
		go x.disown(p)
	}
	return res, err
}

// jitter is a random wait between d/2 and d.
func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

// admit asks Admit whether e may create an operation (opening apr, if
// set); one refused whose key exists already goes on, since its
// reservation creates nothing.
func (x *Executor) admit(e *exec, apr *ledger.ApprovalRequest) (settle func(created, live bool), p *contract.Problem) {
	if x.opts.Admit == nil {
		return noSettle, nil
	}
	if settle, p = x.opts.Admit(e.ctx, e.Tenant, e.admission(apr)); p == nil {
		if settle == nil {
			settle = noSettle
		}
		return settle, nil
	}
	if _, err := x.opts.Store.GetByKey(e.ctx, e.opKey()); err == nil {
		return noSettle, nil
	}
	return nil, p
}

func noSettle(bool, bool) {}

// refused is a problem about op (nil: none), linked to its status
// resource.
func (x *Executor) refused(p *contract.Problem, op *ledger.Operation) Result {
	res := Result{Problem: p.For(op, x.opts.StatusBase), Op: op}
	if op != nil {
		res.State = op.State
	}
	return res
}
