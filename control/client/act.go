package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Action is one effect to perform as an idemgate action: which action (as
// the gateway's configuration declares it), under which key, with which
// command.
type Action struct {
	Name string
	// Key names this one effect and is the same on every retry of it:
	// built from stable identifiers (a workflow's and its step's), never
	// from an attempt number, a time or a random value.
	Key string
	// Command is the effect's parameters, JSON (nil: null). The same key
	// with another command is refused (fingerprint_mismatch).
	Command json.RawMessage
	// Wait is how long a reserve waits for another owner of the key still
	// at work (Prefer: wait, at most 60 s); 0 answers in_progress at once.
	Wait time.Duration
}

// Effect performs the effect, under the lease Act holds and extends. It
// returns the result to record (a value encoding/json encodes, or
// json.RawMessage), or an error: NotPerformed(err) when the effect
// definitely did not happen (the next call runs it again); Failed(result)
// for a definite failure that every retry must get too; any other error
// says nothing of whether it happened, and records unknown. Its context is
// cancelled if the lease is lost.
type Effect func(ctx context.Context) (any, error)

// Acted is what an action became when Act did not refuse: performed now,
// or before (Replayed: by an earlier attempt, or settled by an operator or
// a probe), and then State is its final state and Result what was recorded.
type Acted struct {
	OperationID string
	State       ledger.State // succeeded or failed
	Result      json.RawMessage
	Replayed    bool
}

// NotPerformedError is an effect that said it did not happen: Act released
// the operation, and the same call later runs it again.
type NotPerformedError struct{ Err error }

func (e *NotPerformedError) Error() string { return "not performed: " + e.Err.Error() }
func (e *NotPerformedError) Unwrap() error { return e.Err }

// NotPerformed marks err as a failure that happened before the effect
// could: the effect returns it, and Act releases the operation.
func NotPerformed(err error) error { return &NotPerformedError{Err: err} }

// FailedError is an effect's definite failure, with the result to record.
type FailedError struct{ Result any }

func (e *FailedError) Error() string { return "the effect failed definitely" }

// Failed is what an effect returns for a definite failure: Act records the
// operation failed with result, and every retry gets it replayed.
func Failed(result any) error { return &FailedError{Result: result} }

// OutcomeUnknown is an action that may have happened while nobody knows
// whether it did: this call recorded it so (its effect failed in a way
// that says nothing of the world, or its lease was lost) or found it so.
// Nothing runs it again until a probe or an operator settles the
// operation; the same call then replays what they recorded.
type OutcomeUnknown struct {
	OperationID string
	Reason      string
	Err         error // the effect's error, or the gateway's refusal
}

func (e *OutcomeUnknown) Error() string {
	return fmt.Sprintf("outcome unknown: operation %s (%s): a probe or an operator must settle it", e.OperationID, e.Reason)
}

func (e *OutcomeUnknown) Unwrap() error { return e.Err }

// Act is the Go form of the Python client's client.action: it reserves
// a.Key, and when this call owns the effect runs effect under the lease
// (heartbeats extend it meanwhile) and records how it ended; when the
// operation is final it returns what was recorded without running effect.
// Errors: *ApprovalPending, *OutcomeUnknown, *NotPerformedError, the
// gateway's *contract.Problem, or a transport error; see NextStep.
func (c *Client) Act(ctx context.Context, a Action, effect Effect) (*Acted, error) {
	res, err := c.Reserve(ctx, a.Name, a.Key, a.Command, 0)
	var p *contract.Problem
	if a.Wait > 0 && errors.As(err, &p) && p.Code == contract.CodeInProgress {
		// Only now wait: a first reserve that waited would hold a 202 for
		// its decision too, where the caller has better ways to wait.
		res, err = c.Reserve(ctx, a.Name, a.Key, a.Command, a.Wait)
	}
	if err != nil {
		if errors.As(err, &p) && p.Code == contract.CodeOutcomeUnknown {
			return nil, &OutcomeUnknown{OperationID: p.OperationID, Reason: "found unknown", Err: err}
		}
		return nil, err
	}
	if r := res.Replay; r != nil {
		return &Acted{OperationID: r.Operation.ID, State: r.Operation.State, Result: r.Result, Replayed: true}, nil
	}
	o := &owned{c: c, op: res.Grant.Operation.ID, lease: res.Grant.Lease}
	return o.run(ctx, effect, leaseOf(res.Grant))
}

// leaseOf is the action's lease, from the gateway's own clock (the lease's
// end less the reservation's time), so that a skewed local clock does not
// shorten the heartbeat's period.
func leaseOf(g *contract.ActionGrant) time.Duration {
	if d := g.Lease.Until.Sub(g.Operation.UpdatedAt); d > 0 {
		return d
	}
	return time.Second
}

// owned is an operation this process owns, under its lease.
type owned struct {
	c     *Client
	op    string
	lease contract.LeaseView
	mu    sync.Mutex // one owner step at a time
	lost  error      // a step answered lease_lost
}

func (o *owned) run(ctx context.Context, effect Effect, lease time.Duration) (*Acted, error) {
	ectx, cancel := context.WithCancelCause(ctx)
	stop := o.heartbeat(ectx, cancel, lease)
	result, err := o.perform(ectx, effect)
	stop()
	cancel(nil)
	if o.lostErr() != nil {
		return nil, &OutcomeUnknown{OperationID: o.op, Reason: "lease lost during the effect", Err: o.lostErr()}
	}
	var np *NotPerformedError
	var failed *FailedError
	switch {
	case errors.As(err, &np):
		if _, rerr := o.step(ctx, func(sc context.Context) (*contract.StepAnswer, error) {
			return o.c.Release(sc, o.op, o.lease, note(np.Err.Error()))
		}); rerr != nil {
			return nil, o.unknownAfter(ctx, "the release was not recorded", rerr)
		}
		return nil, np
	case errors.As(err, &failed):
		return o.complete(ctx, ledger.Failed, failed.Result)
	case err != nil:
		return nil, o.unknownAfter(ctx, "the effect returned "+typeName(err), err)
	}
	return o.complete(ctx, ledger.Succeeded, result)
}

// perform runs effect; a panic records unknown (the effect may have begun)
// and goes on up.
func (o *owned) perform(ctx context.Context, effect Effect) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			_ = o.unknownAfter(ctx, "the effect panicked", nil)
			panic(p)
		}
	}()
	return effect(ctx)
}

func (o *owned) complete(ctx context.Context, state ledger.State, result any) (*Acted, error) {
	data, err := encodeResult(result)
	if err != nil {
		return nil, o.unknownAfter(ctx, "its result is not JSON", err)
	}
	ans, err := o.step(ctx, func(sc context.Context) (*contract.StepAnswer, error) {
		return o.c.Complete(sc, o.op, o.lease, string(state), data, "")
	})
	if err != nil {
		return nil, o.unknownAfter(ctx, "the completion was not recorded", err)
	}
	if data == nil {
		data = json.RawMessage("null")
	}
	return &Acted{OperationID: o.op, State: ans.Operation.State, Result: data}, nil
}

func encodeResult(result any) (json.RawMessage, error) {
	if raw, ok := result.(json.RawMessage); ok {
		if raw != nil && !json.Valid(raw) {
			return nil, errors.New("invalid JSON")
		}
		return raw, nil
	}
	return json.Marshal(result)
}

// unknownAfter records unknown (when the lease still holds) and returns the
// OutcomeUnknown the caller gets: the effect may have happened.
func (o *owned) unknownAfter(ctx context.Context, reason string, cause error) error {
	if o.lostErr() == nil {
		_, _ = o.step(ctx, func(sc context.Context) (*contract.StepAnswer, error) {
			return o.c.MarkUnknown(sc, o.op, o.lease, note(reason))
		})
	}
	return &OutcomeUnknown{OperationID: o.op, Reason: reason, Err: cause}
}

// StepDeadline bounds an owner step and its retries. It runs apart from
// the caller's context: an attempt whose own deadline has passed still
// records what its effect did, which is the truth a retry needs.
const StepDeadline = 30 * time.Second

// step makes one owner step, repeated on a lost answer or a "not now": the
// gateway answers a step repeated with the same token and fence as made.
func (o *owned) step(ctx context.Context, call func(context.Context) (*contract.StepAnswer, error)) (*contract.StepAnswer, error) {
	sc, cancel := context.WithTimeout(context.WithoutCancel(ctx), StepDeadline)
	defer cancel()
	o.mu.Lock()
	defer o.mu.Unlock()
	for pause := 100 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		ans, err := call(sc)
		if err == nil {
			return ans, nil
		}
		if isLeaseLost(err) {
			o.lost = err
			return nil, err
		}
		if NextStep(err) != Retry {
			return nil, err
		}
		select {
		case <-sc.Done():
			return nil, err
		case <-time.After(max(pause, RetryAfter(err))):
		}
	}
}

func (o *owned) lostErr() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lost
}

// ErrLeaseLost is the cause of an effect's cancelled context when a
// heartbeat was answered lease_lost: this process no longer owns it.
var ErrLeaseLost = errors.New("the lease was lost: another owner, or the operation is unknown")

// heartbeat extends the lease every third of it until stop is called; a
// heartbeat answered lease_lost cancels the effect's context.
func (o *owned) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, lease time.Duration) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		period := max(lease/3, 10*time.Millisecond)
		for t := time.NewTimer(period); ; t.Reset(period) {
			select {
			case <-done:
				t.Stop()
				return
			case <-t.C:
			}
			hc, hcancel := context.WithTimeout(context.WithoutCancel(ctx), lease)
			o.mu.Lock()
			_, err := o.c.Heartbeat(hc, o.op, o.lease)
			if isLeaseLost(err) {
				o.lost = err
			}
			o.mu.Unlock()
			hcancel()
			switch {
			case isLeaseLost(err):
				cancel(ErrLeaseLost)
				return
			case err != nil:
				period = max(lease/10, 10*time.Millisecond) // again soon, while the lease may hold
			default:
				period = max(lease/3, 10*time.Millisecond)
			}
		}
	}()
	return func() { close(done); <-finished }
}

func isLeaseLost(err error) bool {
	var p *contract.Problem
	return errors.As(err, &p) && p.Code == contract.CodeLeaseLost
}

// Next is what a caller does after an action's error.
type Next int

// What comes after an error of Act.
const (
	// Stop: refused, or definite; the same call gets the same answer.
	Stop Next = iota
	// Retry: nothing was performed, or nothing changed; the same call
	// later (same key, same command) is safe.
	Retry
	// Settle: the outcome is unknown; wait until a probe or an operator
	// settles the operation, then the same call replays what they recorded.
	Settle
	// Approve: a human must decide first; after an approval the same call
	// runs the effect, once.
	Approve
)

// NextStep says what comes after err, an error of Act or of one of the
// actions API's calls.
func NextStep(err error) Next {
	var (
		p   *contract.Problem
		ap  *ApprovalPending
		unk *OutcomeUnknown
		np  *NotPerformedError
		se  *StatusError
	)
	switch {
	case err == nil:
		return Stop
	case errors.As(err, &unk):
		return Settle
	case errors.As(err, &ap):
		return Approve
	case errors.As(err, &np):
		return Retry
	case errors.As(err, &p):
		if p.Code == contract.CodeOutcomeUnknown {
			return Settle
		}
		if contract.Retryable(p.Code) {
			return Retry
		}
		return Stop
	case errors.As(err, &se):
		if se.Status == http.StatusTooManyRequests || se.Status >= 500 {
			return Retry
		}
		return Stop
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Stop
	}
	return Retry // the gateway was not reached, or its answer was lost: asking again is safe
}

// MaxNote is the gateway's bound on a step's reason, in characters.
const MaxNote = 2000

// note is a reason within the gateway's bound: a longer one would be
// refused, and the step with it.
func note(s string) string {
	r := []rune(strings.ToValidUTF8(s, "?"))
	if len(r) <= MaxNote {
		return string(r)
	}
	return string(r[:MaxNote-1]) + "…"
}

// typeName names an error by its type, never its message (which may hold a
// recipient, a token or a payload).
func typeName(err error) string {
	return reflect.TypeOf(err).String()
}

// Named is what an error of Act names, for a message or a workflow's
// details: the operation, the approval it waits for, the problem's code.
type Named struct {
	OperationID, ApprovalID, Code string
}

// NamesOf reads what err names (empty members where it names nothing).
func NamesOf(err error) Named {
	var (
		unk  *OutcomeUnknown
		ap   *ApprovalPending
		prob *contract.Problem
	)
	switch {
	case errors.As(err, &unk):
		return Named{OperationID: unk.OperationID, Code: contract.CodeOutcomeUnknown}
	case errors.As(err, &ap):
		return Named{OperationID: ap.OperationID, ApprovalID: ap.Approval.ID, Code: ap.Code}
	case errors.As(err, &prob):
		return Named{OperationID: prob.OperationID, Code: prob.Code}
	}
	return Named{}
}
