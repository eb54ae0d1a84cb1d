package drill

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/inbox/webhook"
)

// redeliveries is how many times wf-10 sends one event after its first
// delivery, each re-signed a second later than the one before.
const redeliveries = 3

// sameWebhook is wf-10 against a signed webhook route: one event
// delivered, then redelivered as senders do (the same id and body, a new
// timestamp and signature), and for GitHub, whose delivery id is unsigned,
// once more under a new delivery id. One effect, and every redelivery is
// answered 2xx, or the sender would keep retrying.
func (r *Runner) sameWebhook(ctx context.Context) Result {
	a := r.next()
	var bad answer
	res, _ := r.judged(ctx, 1, func() (int, answer) {
		sent := 0
		for i := 0; i <= redeliveries; i++ {
			again := action{key: a.key, body: a.body, late: time.Duration(i) * time.Second}
			n, last := r.retry(ctx, again, 5)
			sent += n
			if !ok(last) && bad.status == 0 && bad.err == nil {
				bad = last
			}
		}
		if r.Scenario.Webhook.Scheme == webhook.GitHub {
			n, last := r.retry(ctx, action{key: a.key + "-redelivered", body: a.body}, 5)
			sent += n
			if !ok(last) && bad.status == 0 && bad.err == nil {
				bad = last
			}
		}
		return sent, answer{}
	})
	switch {
	case res.Verdict == Passed && (bad.status != 0 || bad.err != nil):
		res.Verdict, res.Finding = FailedCheck, FindingLostAnswer
		res.Reason = fmt.Sprintf("one effect, but a delivery was answered %s: the sender would retry it", describe(bad))
	case res.Verdict == Passed:
		res.Reason = fmt.Sprintf("one event delivered %d times, re-signed each time: one effect, every delivery 2xx",
			redeliveries+1)
	}
	return res
}
