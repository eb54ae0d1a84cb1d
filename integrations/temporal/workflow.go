package idemtemporal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// SignalName is the signal a workflow waiting in Execute (with
// Wait.Signal) takes as "look again": whoever settles the operation (an
// operator's tool, a hook on the gateway's audit log) sends it, with any
// payload, typically the operation's id.
const SignalName = "idemgate.settled"

// AwaitSettledName is the name AwaitSettled is registered under.
const AwaitSettledName = "idemgate.AwaitSettled"

// Wait says how Execute waits for an operation to be settled.
type Wait struct {
	// Poll is the time between two looks at the operation (default 30 s):
	// AwaitSettled, retried by Temporal at that interval on the workflow's
	// timers.
	Poll time.Duration
	// Signal waits for SignalName instead of polling.
	Signal bool
	// Timeout bounds the whole wait of one settlement (0: none); past it
	// Execute returns the activity's error.
	Timeout time.Duration
}

// Execute runs activity (whose effect is Perform's) under ctx's activity
// options, with the activity id id: the key of its effect is the same
// every time Execute runs it, so running it again replays or runs once.
// When the activity ends with TypeOutcomeUnknown or TypeApprovalRequired,
// Execute does not repeat the effect: it waits (Wait) until the operation
// is settled (by a probe or an operator) or the approval decided, then
// runs the activity again, which then replays what was recorded, or runs
// the approved effect, once. Any other error is returned as it is.
func Execute(ctx workflow.Context, id string, wait Wait, valuePtr any, activityFn any, args ...any) error {
	opts := workflow.GetActivityOptions(ctx)
	opts.ActivityID = id
	actx := workflow.WithActivityOptions(ctx, opts)
	for {
		err := workflow.ExecuteActivity(actx, activityFn, args...).Get(actx, valuePtr)
		p, typ, ok := PendingOf(err)
		if !ok || (typ != TypeOutcomeUnknown && typ != TypeApprovalRequired) {
			return err
		}
		if werr := await(ctx, wait, p); werr != nil {
			return fmt.Errorf("%w (waiting: %v)", err, werr)
		}
	}
}

// await waits for p's operation to be settled: a signal, or AwaitSettled
// polled by Temporal's retries.
func await(ctx workflow.Context, wait Wait, p Pending) error {
	if wait.Signal {
		ch := workflow.GetSignalChannel(ctx, SignalName)
		if wait.Timeout <= 0 {
			ch.Receive(ctx, nil)
			return nil
		}
		if ok, _ := ch.ReceiveWithTimeout(ctx, wait.Timeout, nil); !ok {
			return errors.New("no signal within the timeout")
		}
		return nil
	}
	poll := cmp.Or(wait.Poll, 30*time.Second)
	var deadline time.Time
	if wait.Timeout > 0 {
		deadline = workflow.Now(ctx).Add(wait.Timeout)
	}
	for {
		left := time.Duration(0)
		if !deadline.IsZero() {
			if left = deadline.Sub(workflow.Now(ctx)); left <= 0 {
				return errors.New("not settled within the timeout")
			}
		}
		pctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout:    time.Minute,
			ScheduleToCloseTimeout: left,
			RetryPolicy: &temporal.RetryPolicy{InitialInterval: poll, BackoffCoefficient: 1, MaximumInterval: poll,
				NonRetryableErrorTypes: []string{TypeRefused}},
		})
		err := workflow.ExecuteActivity(pctx, AwaitSettledName, p).Get(pctx, nil)
		var ae *temporal.ApplicationError
		if err == nil || !errors.As(err, &ae) || ae.Type() != errNotSettled {
			return err
		}
		// The retry policy gave up (a cap on attempts): poll again.
	}
}

// Registry is where Register puts AwaitSettled: a worker, or a test
// environment.
type Registry interface {
	RegisterActivityWithOptions(a any, options activity.RegisterOptions)
}

// Register registers AwaitSettled, which Execute polls, on r.
func Register(r Registry) {
	r.RegisterActivityWithOptions(AwaitSettled, activity.RegisterOptions{Name: AwaitSettledName})
}

// errNotSettled is AwaitSettled's answer while the operation waits:
// retryable, so that Temporal asks again after the poll interval.
const errNotSettled = "IdemgateNotSettled"

// AwaitSettled returns once p's operation is no longer unknown, or its
// approval no longer pending; until then it fails with a retryable error,
// so that Temporal's retry policy polls it. It reads the operation as the
// interceptor's principal.
func AwaitSettled(ctx context.Context, p Pending) error {
	s, ok := ctx.Value(ctxKey{}).(scoped)
	if !ok {
		return temporal.NewNonRetryableApplicationError(ErrNoInterceptor.Error(), TypeRefused, ErrNoInterceptor)
	}
	v, err := s.w.gw.Operation(ctx, p.OperationID)
	if err != nil {
		var prob *contract.Problem
		if errors.As(err, &prob) && prob.Code == contract.CodeNotFound {
			return temporal.NewNonRetryableApplicationError("operation "+p.OperationID+" not found", TypeRefused, err, p)
		}
		return err // the gateway was away: asked again at the next poll
	}
	waiting := v.State == ledger.Unknown
	if p.ApprovalID != "" {
		waiting = v.Approval != nil && v.Approval.Status == ledger.ApprovalPending
	}
	if waiting {
		return temporal.NewApplicationError(fmt.Sprintf("operation %s is still %s", p.OperationID, v.State), errNotSettled)
	}
	return nil
}
