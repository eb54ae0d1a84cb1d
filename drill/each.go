package drill

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/internal/together"
)

// The checks of the workflow article's 12 tests and the agent article's 5
// that a plain HTTP target can show (see checks for the order and ids).

func (r *Runner) sameTwice(ctx context.Context) Result { return r.thenRetry(ctx, Fault{}) }

// thenRetry sends a new action once with the fault f, then retries it as
// a careful agent does: one effect, and the answer in the end.
func (r *Runner) thenRetry(ctx context.Context, f Fault) Result {
	a := r.next()
	res, last := r.judged(ctx, 1, func() (int, answer) {
		_ = r.proxy.Next(f)
		r.send(ctx, a)
		n, last := r.retry(ctx, a, 5)
		return 1 + n, last
	})
	return lostAnswer(res, last)
}

func (r *Runner) concurrentCopies(ctx context.Context) Result {
	a := r.next()
	const copies = 10
	res, _ := r.judged(ctx, 1, func() (int, answer) {
		together.At(copies, func(int) { r.send(ctx, a) })
		return copies, answer{}
	})
	return res
}

// resetFirst: the connection is cut before the request is forwarded (the
// process stopped before the external call): nothing was delivered, and the
// retry must perform the one effect.
func (r *Runner) resetFirst(ctx context.Context) Result { return r.thenRetry(ctx, Fault{Kind: Reset}) }

// replaced: the target performs the write and answers, and the client
// gets a 500 instead (the process stopped after the effect, before it
// recorded it and answered): the client retries, as agents retry a 500.
func (r *Runner) replaced(ctx context.Context) Result {
	return r.thenRetry(ctx, Fault{Kind: Replaced, Status: 500})
}

// lostResponse: applied by the target; the answer never arrives.
func (r *Runner) lostResponse(ctx context.Context) Result {
	return r.thenRetry(ctx, Fault{Kind: LostResponse})
}

func (r *Runner) changedPayload(ctx context.Context) Result {
	a := r.next()
	changed := action{key: a.key, body: r.next().body}
	var second answer
	res, _ := r.judged(ctx, 1, func() (int, answer) {
		n, _ := r.retry(ctx, a, 5)
		second = r.send(ctx, changed)
		return n + 1, second
	})
	if res.Verdict == Passed && ok(second) {
		res.Verdict, res.Finding = FailedCheck, FindingChangedReplayed
		res.Reason = fmt.Sprintf("another request under the same key was answered %d: the change was silently dropped",
			second.status)
	} else if res.Verdict == Passed {
		res.Reason = fmt.Sprintf("the changed request was refused (%s), one effect", describe(second))
	}
	return res
}

func (r *Runner) approvalExpiry(context.Context) Result {
	return notApplicable("needs approvals: a scenario names one write and no approval step to let expire " +
		"(idemgate's own approval expiry is drilled by e2e TestDrillApprovalExpiry)")
}

// longPause: the client gives up on a slow write, which lands later; it
// retries after a pause longer than a short lease. The write is held at the
// proxy until the client has given up, then delivered and answered before
// the pause begins: the order the check is about, whatever the load.
func (r *Runner) longPause(ctx context.Context) Result {
	a := r.next()
	res, _ := r.judged(ctx, 1, func() (int, answer) {
		_ = r.proxy.Next(Fault{Kind: Hold})
		r.giveUpInFlight(ctx, r.client, a, 0)
		r.proxy.Release() // the target applies it later
		if err := r.proxy.Idle(ctx); err != nil {
			return 1, answer{err: err}
		}
		time.Sleep(1500 * time.Millisecond) // a long pause: past a short lease
		n, last := r.retry(ctx, a, 5)
		return 1 + n, last
	})
	return res
}

func (r *Runner) rateLimited(ctx context.Context) Result {
	a := r.next()
	res, last := r.judged(ctx, 1, func() (int, answer) {
		_ = r.proxy.Next(Fault{Kind: Status, Status: 429, RetryAfter: 1})
		n, last := r.retry(ctx, a, 5)
		return n, last
	})
	return lostAnswer(res, last)
}

func (r *Runner) businessKey(ctx context.Context) Result {
	if r.Scenario.Webhook.Scheme != "" {
		return r.sameWebhook(ctx)
	}
	ptr := r.Scenario.BusinessKey
	if ptr == "" {
		return notApplicable("the scenario names no business_key")
	}
	a, b := r.sharing(ptr, "drill-event-")
	res, _ := r.judged(ctx, 1, func() (int, answer) {
		n, _ := r.retry(ctx, a, 5)
		m, _ := r.retry(ctx, b, 5)
		return n + m, answer{}
	})
	return res
}

// sharing is two new actions whose bodies hold one value at ptr.
func (r *Runner) sharing(ptr, prefix string) (action, action) {
	a, b := r.next(), r.next()
	value := prefix + r.run + "-" + a.key
	a.body, b.body = setPointer(a.body, ptr, value), setPointer(b.body, ptr, value)
	return a, b
}

func (r *Runner) nextFails(context.Context) Result {
	return notApplicable("needs a workflow of several effects: a scenario names one write " +
		"(idemgate's workflows are drilled by e2e TestWorkflowStepFailsResumeRunsTheRest)")
}

// newKey: the same request again under a new key, on purpose: two
// effects. Where the scenario names a business key, the new action is a
// new event too (its own business key value): the operator asks for a new
// action, not for the same event again.
func (r *Runner) newKey(ctx context.Context) Result {
	a, b := r.next(), r.next()
	again := action{key: b.key, body: a.body}
	if ptr := r.Scenario.BusinessKey; ptr != "" {
		again.body = setPointer(a.body, ptr, "drill-event-"+r.run+"-"+b.key)
	}
	res, _ := r.judged(ctx, 2, func() (int, answer) {
		n, _ := r.retry(ctx, a, 5)
		m, _ := r.retry(ctx, again, 5)
		return n + m, answer{}
	})
	return res
}

// restarted: the agent's attempt is slow, the agent dies and a new process
// (a new client, nothing but the key from its journal) retries at once,
// while the first attempt is still on its way to the target: held at the
// proxy until the retry has its answer, then delivered.
func (r *Runner) restarted(ctx context.Context) Result {
	a := r.next()
	res, last := r.judged(ctx, 1, func() (int, answer) {
		_ = r.proxy.Next(Fault{Kind: Hold})
		r.giveUpInFlight(ctx, r.client, a, 0) // the agent dies with the request in flight
		n, last := r.retryWith(ctx, r.newClient(), a, 5)
		r.proxy.Release()
		return 1 + n, last
	})
	return lostAnswer(res, last)
}

// giveUpInFlight sends a with c and gives up after it has reached the
// proxy and waited there patience, as a client whose timeout ends while the
// request is on its way. Counting from the moment it was sent instead
// would, on a loaded machine, give up before it reached the proxy: the
// fault queued for it would then fall on the retry, and a naive target
// would seem to pass.
func (r *Runner) giveUpInFlight(ctx context.Context, c *http.Client, a action, patience time.Duration) {
	before := r.proxy.Counts().Requests
	short, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); r.sendWith(short, c, a) }()
	for deadline := time.Now().Add(time.Minute); r.proxy.Counts().Requests == before && time.Now().Before(deadline); {
		select {
		case <-done:
			return // answered (or refused) before the proxy saw it: nothing to give up
		case <-time.After(5 * time.Millisecond):
		}
	}
	select {
	case <-done:
	case <-time.After(patience):
	}
	cancel()
	<-done
}
