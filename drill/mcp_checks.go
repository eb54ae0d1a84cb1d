package drill

import (
	"context"
	"sync"
	"time"
)

// lost: the first call's answer is lost after the effect; the agent
// retries the same intent, and must get its answer with one effect.
func (r *MCPRunner) lost(ctx context.Context) Result {
	a, err := r.next()
	if err != nil {
		return Result{Verdict: FailedCheck, Reason: err.Error()}
	}
	return r.judged(ctx, 1, func() (int, string, string) {
		_, _ = r.call(ctx, &loser{}, a)
		ok, n := r.retryUntilAnswered(ctx, a)
		if !ok {
			return 1 + n, FindingLostAnswer, "the retries never got the call's answer"
		}
		return 1 + n, "", "the retry got the one answer"
	})
}

// retryUntilAnswered calls a again while it is refused (in progress), as
// a patient agent does: at most 10 times.
func (r *MCPRunner) retryUntilAnswered(ctx context.Context, a mcpAction) (bool, int) {
	for i := 1; i <= 10; i++ {
		if ok, err := r.call(ctx, nil, a); ok && err == nil {
			return true, i
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false, 10
}

// concurrent: five copies of one call at once are one effect.
func (r *MCPRunner) concurrent(ctx context.Context) Result {
	a, err := r.next()
	if err != nil {
		return Result{Verdict: FailedCheck, Reason: err.Error()}
	}
	return r.judged(ctx, 1, func() (int, string, string) {
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() { _, _ = r.call(ctx, nil, a) })
		}
		wg.Wait()
		ok, n := r.retryUntilAnswered(ctx, a)
		if !ok {
			return 5 + n, FindingLostAnswer, "no copy's answer could be had again"
		}
		return 5 + n, "", "five copies, one effect"
	})
}

// changed: the same intent with other arguments must be refused, not
// performed and not answered as a success.
func (r *MCPRunner) changed(ctx context.Context) Result {
	a, err := r.next()
	b, err2 := r.next()
	if err != nil || err2 != nil {
		return Result{Verdict: FailedCheck, Reason: "arguments: the template failed"}
	}
	b.intent = a.intent
	return r.judged(ctx, 1, func() (int, string, string) {
		_, _ = r.call(ctx, nil, a)
		if ok, err := r.call(ctx, nil, b); ok && err == nil {
			return 2, FindingChangedReplayed, "the changed call was answered as a success"
		}
		return 2, "", "the changed call was refused"
	})
}

// restarted: an agent that restarts and calls the same intent in a new
// session gets the one effect's answer.
func (r *MCPRunner) restarted(ctx context.Context) Result {
	a, err := r.next()
	if err != nil {
		return Result{Verdict: FailedCheck, Reason: err.Error()}
	}
	return r.judged(ctx, 1, func() (int, string, string) {
		_, _ = r.call(ctx, nil, a)
		if ok, err := r.call(ctx, nil, a); !ok || err != nil {
			return 2, FindingLostAnswer, "the restarted agent did not get the answer"
		}
		return 2, "", "the restarted agent got the one answer"
	})
}
