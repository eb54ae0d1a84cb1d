// Package idemtemporal makes a Temporal activity's effect on the outside
// world an idemgate action: reserved before it starts under a key named by
// the workflow and the activity, performed once, its result replayed to
// every retried attempt, and an outcome nobody knows kept unknown until a
// probe or an operator settles it, while the workflow waits.
//
// Temporal retries an activity until an attempt returns, so an effect that
// happened in an attempt that then failed, or timed out, happens again in
// the next one; Temporal's own advice is that activities be idempotent.
// With idemtemporal:
//
//	w := worker.New(tc, "queue", worker.Options{
//		Interceptors: []interceptor.WorkerInterceptor{idemtemporal.NewInterceptor(gw)}})
//	idemtemporal.Register(w)
//
//	func SendReply(ctx context.Context, t Ticket) (Sent, error) {
//		return idemtemporal.Perform(ctx, idemtemporal.Action{Name: "support.reply.send", Command: t},
//			func(ctx context.Context) (Sent, error) { return mail.Send(ctx, t) })
//	}
//
// and in the workflow, idemtemporal.Execute runs the activity, waiting for
// an approver or an operator when the gateway says so (see Execute).
package idemtemporal

import (
	"cmp"
	"context"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/idemgate/idemgate/control/client"
)

// HeaderScope is the Temporal header in which the workflow's side of the
// interceptor tells each activity the scope of its key (see Scope).
const HeaderScope = "idemgate-key-scope"

// Options tune the interceptor.
type Options struct {
	// Wait is how long a reserve waits for another attempt still at the
	// same effect (a timed-out attempt whose goroutine goes on) before
	// the attempt is retried (default 10 s; the gateway caps it at 60 s).
	Wait time.Duration
}

// NewInterceptor is the worker interceptor that makes Perform work: on the
// workflow's side it names each activity's key scope in a header, on the
// activity's it hands Perform the gateway's client gw (whose principal
// reserves the actions). Register it on every worker that runs the
// workflows or their activities.
func NewInterceptor(gw *client.Client, opts ...Options) interceptor.WorkerInterceptor {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	o.Wait = cmp.Or(o.Wait, 10*time.Second)
	return &workerInterceptor{gw: gw, opts: o}
}

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
	gw   *client.Client
	opts Options
}

// scoped is what the activity's context carries for Perform.
type scoped struct {
	w     *workerInterceptor
	scope string
	ok    bool // the workflow's side named the scope
}

type ctxKey struct{}

func (w *workerInterceptor) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &activityInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, w: w}
}

func (w *workerInterceptor) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &workflowInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}}
}

type activityInbound struct {
	interceptor.ActivityInboundInterceptorBase
	w *workerInterceptor
}

func (a *activityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	s := scoped{w: a.w}
	if p, ok := interceptor.Header(ctx)[HeaderScope]; ok {
		s.ok = converter.GetDefaultDataConverter().FromPayload(p, &s.scope) == nil
	}
	return a.Next.ExecuteActivity(context.WithValue(ctx, ctxKey{}, s), in)
}

type workflowInbound struct {
	interceptor.WorkflowInboundInterceptorBase
}

func (i *workflowInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&workflowOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}})
}

type workflowOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
}

func (o *workflowOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	if p, err := converter.GetDefaultDataConverter().ToPayload(Scope(workflow.GetInfo(ctx))); err == nil {
		interceptor.WorkflowHeader(ctx)[HeaderScope] = p
	}
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

// Scope is the part of an activity's key that tells the runs of one
// workflow id apart, where they are different work. It is empty for the
// first run of a workflow id, for its resets (a reset copies the run's
// start, so its activities meet the keys of the run it resets) and for its
// retries (the same work again); a run that continues another
// (continue-as-new, cron) starts its own scope, its original run id, which
// its resets keep too: its activity ids start again at 1 and must not meet
// the keys of the runs before it.
func Scope(info *workflow.Info) string {
	if info.ContinuedExecutionRunID == "" || info.Attempt > 1 {
		return ""
	}
	return cmp.Or(info.OriginalRunID, info.WorkflowExecution.RunID)
}
