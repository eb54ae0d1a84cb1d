package drill

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// judged counts the target's effects around act and judges the growth
// against expected; act returns the requests it sent and the answer it
// finished on, for the findings that read answers.
func (r *Runner) judged(ctx context.Context, expected int64, act func() (int, answer)) (Result, answer) {
	before, err := r.effects(ctx)
	if err != nil {
		return Result{Verdict: FailedCheck, Reason: err.Error()}, answer{}
	}
	requests, last := act()
	got, err := r.settle(ctx, before)
	res := Result{Requests: requests, Effects: got, Expected: expected}
	switch {
	case err != nil:
		res.Verdict, res.Reason = FailedCheck, err.Error()
	case got > expected:
		res.Verdict, res.Finding = FailedCheck, "duplicate_effect"
		res.Reason = fmt.Sprintf("%d effects for %d intended", got, expected)
	case got < expected:
		res.Verdict, res.Reason = FailedCheck, fmt.Sprintf("%d effects, %d intended: an action was lost or merged", got, expected)
	default:
		res.Verdict, res.Reason = Passed, fmt.Sprintf("%d effect(s), as intended", got)
	}
	return res, last
}

func ok(a answer) bool { return a.err == nil && a.status >= 200 && a.status < 300 }

// retry sends a until it gets a final answer, waiting as a careful agent
// does: Retry-After, or a second, on 409, 425, 429 and 503. It returns the
// requests sent and the last answer.
func (r *Runner) retry(ctx context.Context, a action, tries int) (int, answer) {
	var last answer
	for i := 1; i <= tries; i++ {
		last = r.send(ctx, a)
		if last.err == nil && !waitable(last.status) {
			return i, last
		}
		wait := time.Second
		if last.err == nil {
			if s, err := strconv.Atoi(last.header.Get("Retry-After")); err == nil && s >= 0 && s <= 10 {
				wait = time.Duration(s) * time.Second
			}
		}
		time.Sleep(wait)
	}
	return tries, last
}

func waitable(status int) bool {
	return status == 409 || status == 425 || status == 429 || status == 503
}

// lostAnswer marks a result whose retry never got the answer.
func lostAnswer(res Result, last answer) Result {
	if res.Verdict == Passed && !ok(last) {
		res.Verdict, res.Finding = FailedCheck, "lost_answer"
		res.Reason = fmt.Sprintf("one effect, but the retry never got the answer (last: %s)", describe(last))
	}
	return res
}

func describe(a answer) string {
	if a.err != nil {
		return "no answer: " + a.err.Error()
	}
	return strconv.Itoa(a.status)
}

func (r *Runner) sameTwice(ctx context.Context) Result {
	a := r.next()
	res, last := r.judged(ctx, 1, func() (int, answer) {
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
		var wg sync.WaitGroup
		for range copies {
			wg.Add(1)
			go func() { defer wg.Done(); r.send(ctx, a) }()
		}
		wg.Wait()
		return copies, answer{}
	})
	return res
}

func (r *Runner) lostResponse(ctx context.Context) Result {
	a := r.next()
	res, last := r.judged(ctx, 1, func() (int, answer) {
		_ = r.proxy.Next(Fault{Kind: LostResponse})
		r.send(ctx, a) // applied by the target; the answer never arrives
		n, last := r.retry(ctx, a, 5)
		return 1 + n, last
	})
	return lostAnswer(res, last)
}

func (r *Runner) changedPayload(ctx context.Context) Result {
	a := r.next()
	changed := action{key: a.key, body: r.next().body}
	var second answer
	res, _ := r.judged(ctx, 1, func() (int, answer) {
		r.retry(ctx, a, 5)
		second = r.send(ctx, changed)
		return 2, second
	})
	if res.Verdict == Passed && ok(second) {
		res.Verdict, res.Finding = FailedCheck, "changed_payload_replayed"
		res.Reason = fmt.Sprintf("another request under the same key was answered %d: the change was silently dropped",
			second.status)
	} else if res.Verdict == Passed {
		res.Reason = fmt.Sprintf("the changed request was refused (%s), one effect", describe(second))
	}
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

func (r *Runner) longPause(ctx context.Context) Result {
	a := r.next()
	res, _ := r.judged(ctx, 1, func() (int, answer) {
		_ = r.proxy.Next(Fault{Kind: Delay, Delay: 1500 * time.Millisecond})
		short, cancel := context.WithTimeout(ctx, time.Second)
		r.send(short, a) // the client gives up; the target applies it later
		cancel()
		time.Sleep(2500 * time.Millisecond) // a long pause: past a short lease
		n, last := r.retry(ctx, a, 5)
		return 1 + n, last
	})
	return res
}

func (r *Runner) businessKey(ctx context.Context) Result {
	ptr := r.Scenario.BusinessKey
	if ptr == "" {
		return Result{Verdict: NotApplicable, Reason: "the scenario names no business_key"}
	}
	a, b := r.next(), r.next()
	event := "drill-event-" + r.run + "-" + a.key
	a.body, b.body = withKey(a.body, ptr, event), withKey(b.body, ptr, event)
	res, _ := r.judged(ctx, 1, func() (int, answer) {
		r.retry(ctx, a, 5)
		r.retry(ctx, b, 5)
		return 2, answer{}
	})
	return res
}

func (r *Runner) newKey(ctx context.Context) Result {
	a := r.next()
	again := action{key: r.next().key, body: a.body}
	res, _ := r.judged(ctx, 2, func() (int, answer) {
		r.retry(ctx, a, 5)
		r.retry(ctx, again, 5)
		return 2, answer{}
	})
	return res
}
