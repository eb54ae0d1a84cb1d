package drill

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/internal/together"
)

// The checks of what a target exposes beyond its write: a status resource
// for an operation, a concurrency group.

// honest are the states a status resource may show for a write that was
// applied but whose answer was lost: done, or honestly not known. Absent,
// prepared or failed would tell the caller the write did not happen.
var honest = map[string]bool{"succeeded": true, "unknown": true}

// disputedStatus: after a lost response, the caller asks the status
// resource with the same key, as the agent article's retry rule says, and
// must learn the truth before retrying.
func (r *Runner) disputedStatus(ctx context.Context) Result {
	if r.Scenario.Status.Get == "" {
		return notApplicable("no status resource: the scenario names no status")
	}
	a := r.next()
	var state string
	var stateErr error
	res, last := r.judged(ctx, 1, func() (int, answer) {
		_ = r.proxy.Next(Fault{Kind: LostResponse})
		r.send(ctx, a)
		state, stateErr = r.settledState(ctx, a.key)
		n, last := r.retry(ctx, a, 5)
		return 1 + n, last
	})
	if res.Verdict != Passed {
		return res
	}
	switch {
	case stateErr != nil:
		res.Verdict, res.Finding, res.Reason = FailedCheck, FindingError, stateErr.Error()
	case !honest[state]:
		res.Verdict, res.Finding = FailedCheck, FindingDishonestStatus
		res.Reason = fmt.Sprintf("after a lost answer the status resource says %q: want succeeded or unknown", state)
	default:
		res = lostAnswer(res, last)
		if res.Verdict == Passed {
			res.Reason = fmt.Sprintf("after a lost answer the status resource says %s; one effect", state)
		}
	}
	return res
}

// settledState reads the operation's state by key, waiting while it is
// executing (the write may still be finishing); "absent" when the status
// resource does not know the key.
func (r *Runner) settledState(ctx context.Context, key string) (string, error) {
	where, err := r.Scenario.StatusURL(key)
	if err != nil {
		return "", err
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		status, header, body, err := r.get(ctx, where)
		if err != nil {
			return "", fmt.Errorf("status: %w", err)
		}
		if status == http.StatusNotFound {
			return "absent", nil
		}
		state, err := r.Scenario.State(status, header, body)
		if err != nil || state != "executing" || time.Now().After(deadline) {
			return state, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// concurrencyGroup: two distinct actions of one concurrency group sent at
// the same moment: never both performed, one refused while the other is
// live.
func (r *Runner) concurrencyGroup(ctx context.Context) Result {
	ptr := r.Scenario.ConcurrencyKey
	if ptr == "" {
		return notApplicable("the scenario names no concurrency_key")
	}
	a, b := r.sharing(ptr, "drill-group-")
	res, _ := r.judged(ctx, 1, func() (int, answer) {
		together.At(2, func(i int) { r.send(ctx, []action{a, b}[i]) })
		return 2, answer{}
	})
	if res.Finding == FindingDuplicate {
		res.Finding = FindingGroupOverlap
		res.Reason = fmt.Sprintf("two actions of one group sent at once, %d performed: want one, the other refused",
			res.Effects)
	}
	return res
}
