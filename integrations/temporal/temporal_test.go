package idemtemporal_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control/client"
	"github.com/idemgate/idemgate/integrations/temporal"
	"github.com/idemgate/idemgate/ledger"
)

func startOptions(id string) tclient.StartWorkflowOptions {
	return tclient.StartWorkflowOptions{ID: id, TaskQueue: "replies"}
}

// SendReply is the activity under test: its effect is a reply at the
// upstream, performed as the action support.reply.send.
func (a *acts) SendReply(ctx context.Context, t Ticket) (Sent, error) {
	run := a.runs.Add(1)
	sent, err := idemtemporal.Perform(ctx, idemtemporal.Action{Name: "support.reply.send", Command: t},
		func(ctx context.Context) (Sent, error) {
			s, err := post(ctx, a.up, "reply-"+t.ID)
			if err == nil && a.effectErr != nil {
				return Sent{}, a.effectErr
			}
			return s, err
		})
	if err != nil {
		return Sent{}, err
	}
	if a.after != nil {
		if err := a.after(ctx, run); err != nil {
			return Sent{}, err
		}
	}
	return sent, nil
}

// Refund is an activity whose action needs an approver.
func (a *acts) Refund(ctx context.Context, amount int) (Sent, error) {
	a.runs.Add(1)
	return idemtemporal.Perform(ctx, idemtemporal.Action{Name: "refund.issue",
		Command: map[string]any{"amount_minor": amount, "customer": "c-9"}},
		func(ctx context.Context) (Sent, error) { return post(ctx, a.up, "refund") })
}

// replyOptions: the activity is retried by Temporal, quickly.
var replyOptions = workflow.ActivityOptions{
	StartToCloseTimeout: time.Minute,
	RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
}

// ReplyWorkflow sends one reply through Execute.
func ReplyWorkflow(ctx workflow.Context, t Ticket, wait idemtemporal.Wait) (Sent, error) {
	ctx = workflow.WithActivityOptions(ctx, replyOptions)
	var a *acts
	var sent Sent
	err := idemtemporal.Execute(ctx, "reply", wait, &sent, a.SendReply, t)
	return sent, err
}

// RefundWorkflow issues one refund through Execute.
func RefundWorkflow(ctx workflow.Context, amount int) (Sent, error) {
	ctx = workflow.WithActivityOptions(ctx, replyOptions)
	var a *acts
	var sent Sent
	err := idemtemporal.Execute(ctx, "refund", idemtemporal.Wait{Poll: time.Minute}, &sent, a.Refund, amount)
	return sent, err
}

// TestRetriedAttempt: the activity performs its effect, then its attempt
// fails before it returns; Temporal retries it, and the retry gets the
// recorded result without performing the effect again.
func TestRetriedAttempt(t *testing.T) {
	eachStore(t, func(t *testing.T, r *rig) {
		a := &acts{up: r.up, after: func(ctx context.Context, run int32) error {
			if run == 1 && activity.GetInfo(ctx).Attempt == 1 {
				return errors.New("the worker failed after the effect")
			}
			return nil
		}}
		env := r.env("wf-retried", a)
		env.ExecuteWorkflow(ReplyWorkflow, Ticket{ID: "584", Version: 3}, idemtemporal.Wait{})
		var sent Sent
		if err := env.GetWorkflowResult(&sent); err != nil {
			t.Fatal(err)
		}
		if n := r.up.Count("reply-584"); n != 1 || a.runs.Load() != 2 || sent.Effect != "reply-584#1" {
			t.Fatalf("%d effects in %d attempts, result %+v", n, a.runs.Load(), sent)
		}
		report(t, "effects", r.up.Count("reply-584"))
	})
}

// TestTimedOutAttempt: the attempt performs its effect and then hangs past
// its start-to-close timeout. The next attempt of the same activity gets
// the recorded result; the effect happened once.
func TestTimedOutAttempt(t *testing.T) {
	eachStore(t, func(t *testing.T, r *rig) {
		a := &acts{up: r.up, after: func(ctx context.Context, run int32) error {
			if run == 1 {
				<-ctx.Done() // hangs after the effect, until the attempt times out
				return ctx.Err()
			}
			return nil
		}}
		env := r.env("wf-timeout", a)
		env.ExecuteWorkflow(TimeoutWorkflow, Ticket{ID: "585", Version: 1})
		var out TimeoutResult
		if err := env.GetWorkflowResult(&out); err != nil {
			t.Fatal(err)
		}
		if n := r.up.Count("reply-585"); n != 1 || !out.TimedOut || out.Sent.Effect != "reply-585#1" || a.runs.Load() != 2 {
			t.Fatalf("%d effects in %d attempts, %+v", n, a.runs.Load(), out)
		}
		report(t, "effects", r.up.Count("reply-585"))
	})
}

// TimeoutResult is what TimeoutWorkflow saw.
type TimeoutResult struct {
	TimedOut bool // the first attempt timed out
	Sent     Sent
}

// TimeoutWorkflow runs SendReply with a start-to-close timeout of one
// second. Temporal's server retries an attempt that timed out with the
// next attempt of the same activity (same id); the test environment does
// not (it reports the timeout to the workflow), so the workflow does what
// the server would: it schedules the activity again under the same id.
func TimeoutWorkflow(ctx workflow.Context, t Ticket) (TimeoutResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{ActivityID: "reply", StartToCloseTimeout: time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3}})
	var a *acts
	var out TimeoutResult
	err := workflow.ExecuteActivity(ctx, a.SendReply, t).Get(ctx, &out.Sent)
	var te *temporal.TimeoutError
	if errors.As(err, &te) {
		out.TimedOut = true
		err = workflow.ExecuteActivity(ctx, a.SendReply, t).Get(ctx, &out.Sent)
	}
	return out, err
}

// TestChangedCommand: the same workflow id and activity id with another
// command (a reset or a re-run whose input changed) is refused, naming the
// operation; with the same command it replays. A run that continues
// another (continue-as-new) has keys of its own.
func TestChangedCommand(t *testing.T) {
	eachStore(t, func(t *testing.T, r *rig) {
		run := func(tk Ticket, continued bool) (Sent, error) {
			env := r.env("wf-changed", &acts{up: r.up})
			if continued {
				env.SetContinuedExecutionRunID("the-run-before")
			}
			env.ExecuteWorkflow(ReplyWorkflow, tk, idemtemporal.Wait{})
			var sent Sent
			if err := env.GetWorkflowError(); err != nil {
				return sent, err
			}
			return sent, env.GetWorkflowResult(&sent)
		}
		if _, err := run(Ticket{ID: "586", Version: 3}, false); err != nil {
			t.Fatal(err)
		}
		_, err := run(Ticket{ID: "586", Version: 4}, false)
		p, typ, ok := idemtemporal.PendingOf(err)
		if !ok || typ != idemtemporal.TypeRefused || p.Code != contract.CodeFingerprintMismatch || p.OperationID == "" ||
			!strings.Contains(err.Error(), p.OperationID) {
			t.Fatalf("a changed command: %v (%+v)", err, p)
		}
		if sent, err := run(Ticket{ID: "586", Version: 3}, false); err != nil || sent.Effect != "reply-586#1" {
			t.Fatalf("the same command again: %+v %v", sent, err)
		}
		report(t, "effects", r.up.Count("reply-586"))
		if n := r.up.Count("reply-586"); n != 1 {
			t.Fatalf("%d effects", n)
		}
		if sent, err := run(Ticket{ID: "586", Version: 4}, true); err != nil || sent.Effect != "reply-586#2" {
			t.Fatalf("a continued run: %+v %v", sent, err)
		}
	})
}

// TestUnknownWaitsForOperator: the effect reaches the upstream and its
// answer is lost: the operation is unknown and the activity fails without
// retry. The workflow waits (polling, or for a signal) instead of sending
// again; once an operator resolves the operation through the control API,
// it gets the resolved result. One effect.
func TestUnknownWaitsForOperator(t *testing.T) {
	for _, wait := range []idemtemporal.Wait{{Poll: time.Minute}, {Signal: true}} {
		name := "poll"
		if wait.Signal {
			name = "signal"
		}
		t.Run(name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, r *rig) {
				a := &acts{up: r.up, effectErr: errors.New("connection reset after sending")}
				env := r.env("wf-unknown-"+name, a)
				resolved := false
				env.RegisterDelayedCallback(func() {
					resolved = r.resolveUnknown(t)
					if wait.Signal {
						env.SignalWorkflow(idemtemporal.SignalName, "settled")
					}
				}, 10*time.Minute)
				env.ExecuteWorkflow(ReplyWorkflow, Ticket{ID: "587", Version: 1}, wait)
				var sent Sent
				if err := env.GetWorkflowResult(&sent); err != nil {
					t.Fatal(err)
				}
				if n := r.up.Count("reply-587"); n != 1 || !resolved || sent.Effect != "found-in-the-mail-log" || a.runs.Load() != 2 {
					t.Fatalf("%d effects, %d runs, resolved %v, result %+v", n, a.runs.Load(), resolved, sent)
				}
				report(t, "effects", r.up.Count("reply-587"))
			})
		})
	}
}

// resolveUnknown is the operator: alice finds the one unknown operation
// and resolves it as succeeded, with the result she found.
func (r *rig) resolveUnknown(t *testing.T) bool {
	ctx := context.Background()
	page, err := r.alice.Operations(ctx, client.ListQuery{State: string(ledger.Unknown)})
	if err != nil || len(page.Operations) != 1 {
		t.Errorf("unknown operations: %+v %v", page, err)
		return false
	}
	if n := r.up.Count("reply-587"); n != 1 {
		t.Errorf("while unknown: %d effects", n)
	}
	_, err = r.alice.Resolve(ctx, page.Operations[0].ID, contract.ResolveRequest{State: "succeeded",
		Note: "the reply is in the mail log", Result: []byte(`{"effect":"found-in-the-mail-log"}`)})
	if err != nil {
		t.Errorf("resolve: %v", err)
	}
	return err == nil
}

// TestApprovalWaits: the refund needs an approver: nothing is performed
// while it waits; the requester may not approve it; once bob, a second
// principal, approves, the workflow runs it, once.
func TestApprovalWaits(t *testing.T) {
	eachStore(t, func(t *testing.T, r *rig) {
		a := &acts{up: r.up}
		env := r.env("wf-refund", a)
		approved := false
		env.RegisterDelayedCallback(func() { approved = r.approve(t) }, 10*time.Minute)
		env.ExecuteWorkflow(RefundWorkflow, 5000)
		var sent Sent
		if err := env.GetWorkflowResult(&sent); err != nil {
			t.Fatal(err)
		}
		if n := r.up.Count("refund"); n != 1 || !approved || sent.Effect != "refund#1" || a.runs.Load() != 2 {
			t.Fatalf("%d effects, %d runs, approved %v, result %+v", n, a.runs.Load(), approved, sent)
		}
		report(t, "effects", r.up.Count("refund"))
	})
}

// approve: the requester's own approval is refused; bob's is taken.
func (r *rig) approve(t *testing.T) bool {
	ctx := context.Background()
	page, err := r.bob.Approvals(ctx, client.ApprovalQuery{Status: string(ledger.ApprovalPending)})
	if err != nil || len(page.Approvals) != 1 {
		t.Errorf("pending approvals: %+v %v", page, err)
		return false
	}
	if n := r.up.Count("refund"); n != 0 {
		t.Errorf("performed before approval: %d", n)
	}
	ap := page.Approvals[0]
	d := contract.Decision{Fingerprint: ap.Fingerprint, Note: "checked the invoice"}
	var p *contract.Problem
	if _, err := r.worker.Approve(ctx, ap.ID, d); !errors.As(err, &p) || p.Code != contract.CodeForbidden {
		t.Errorf("the requester approves its own refund: %v", err)
	}
	if _, err := r.bob.Approve(ctx, ap.ID, d); err != nil {
		t.Errorf("bob approves: %v", err)
		return false
	}
	return true
}

// TestScope: the first run of a workflow id, its resets and its retries
// share one scope (the empty one); a run that continues another has its
// own, which its resets keep.
func TestScope(t *testing.T) {
	first := &workflow.Info{WorkflowExecution: workflow.Execution{ID: "wf", RunID: "r1"}, OriginalRunID: "r1", Attempt: 1}
	reset := &workflow.Info{WorkflowExecution: workflow.Execution{ID: "wf", RunID: "r2"}, OriginalRunID: "r1", Attempt: 1}
	retry := &workflow.Info{WorkflowExecution: workflow.Execution{ID: "wf", RunID: "r3"}, OriginalRunID: "r3", Attempt: 2, ContinuedExecutionRunID: "r1"}
	continued := &workflow.Info{WorkflowExecution: workflow.Execution{ID: "wf", RunID: "r4"}, OriginalRunID: "r4", Attempt: 1, ContinuedExecutionRunID: "r1"}
	continuedReset := &workflow.Info{WorkflowExecution: workflow.Execution{ID: "wf", RunID: "r5"}, OriginalRunID: "r4", Attempt: 1, ContinuedExecutionRunID: "r1"}
	for _, c := range []struct {
		info *workflow.Info
		want string
	}{{first, ""}, {reset, ""}, {retry, ""}, {continued, "r4"}, {continuedReset, "r4"}} {
		if got := idemtemporal.Scope(c.info); got != c.want {
			t.Errorf("%+v: scope %q, want %q", c.info, got, c.want)
		}
	}
}
