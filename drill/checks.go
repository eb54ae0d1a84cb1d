package drill

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Verdict is how a check came out.
type Verdict string

// The verdicts. A check that cannot apply to the target is NotApplicable,
// with its reason: never passed.
const (
	Passed        Verdict = "passed"
	FailedCheck   Verdict = "failed"
	NotApplicable Verdict = "not_applicable"
)

// The findings: what a failed check found. Every failed check names one.
const (
	// FindingDuplicate: more effects than intended actions.
	FindingDuplicate = "duplicate_effect"
	// FindingLostAnswer: one effect, but the retries never got its answer.
	FindingLostAnswer = "lost_answer"
	// FindingChangedReplayed: another request under a used key was answered
	// as a success: the change was silently dropped (or silently applied).
	FindingChangedReplayed = "changed_payload_replayed"
	// FindingMissing: fewer effects than intended: an action was lost, or
	// two deliberate actions were merged into one.
	FindingMissing = "missing_effect"
	// FindingGroupOverlap: two actions of one concurrency group were both
	// performed at once.
	FindingGroupOverlap = "group_overlap"
	// FindingDishonestStatus: after a lost answer the status resource did
	// not say succeeded or unknown (it did not know the key, or said the
	// write had not happened).
	FindingDishonestStatus = "dishonest_status"
	// FindingError: the check could not be judged (the effect count could
	// not be read): a drill that cannot measure passes nothing.
	FindingError = "error"
)

// Result is one check's report line. ID and Check are the check's stable
// identity (the JSON and JUnit key); Covers names the articles' tests it
// plays (wf-N: the workflow article's N-th, agent-N: the agent article's).
type Result struct {
	ID       string   `json:"id"`
	Check    string   `json:"check"`
	Covers   []string `json:"covers"`
	Requests int      `json:"requests"`
	Effects  int64    `json:"effects"`
	Expected int64    `json:"expected"`
	Verdict  Verdict  `json:"verdict"`
	Finding  string   `json:"finding,omitempty"`
	Reason   string   `json:"reason"`
}

// Serious reports whether a result is one the exit status must flag:
// every failed check (a duplicate effect, a lost answer, a silent replay of
// a changed payload, and the rest of the findings).
func (r Result) Serious() bool { return r.Verdict == FailedCheck }

// check is one named check.
type check struct {
	id     string
	name   string
	covers []string
	fn     func(r *Runner, ctx context.Context) Result
}

// checks are the articles' checks, in the order the workflow article lists
// its 12 tests, then the agent article's one no other check plays, then
// the two about what a target exposes. Their ids and names are stable.
var checks = []check{
	{"wf-1", "same request twice", []string{"wf-1"}, (*Runner).sameTwice},
	{"wf-2", "concurrent copies, one key", []string{"wf-2", "agent-2"}, (*Runner).concurrentCopies},
	{"wf-3", "reset before delivery, then a retry", []string{"wf-3"}, (*Runner).resetFirst},
	{"wf-4", "applied, then the answer replaced by 500", []string{"wf-4", "agent-5"}, (*Runner).replaced},
	{"wf-5", "lost response, then a retry", []string{"wf-5", "agent-1"}, (*Runner).lostResponse},
	{"wf-6", "payload changed under one key", []string{"wf-6", "agent-4"}, (*Runner).changedPayload},
	{"wf-7", "approval expires before execution", []string{"wf-7"}, (*Runner).approvalExpiry},
	{"wf-8", "retry after a long pause (lease expiry)", []string{"wf-8"}, (*Runner).longPause},
	{"wf-9", "429 and its Retry-After", []string{"wf-9"}, (*Runner).rateLimited},
	{"wf-10", "the same webhook several times (business key)", []string{"wf-10"}, (*Runner).businessKey},
	{"wf-11", "one effect succeeds and the next fails", []string{"wf-11"}, (*Runner).nextFails},
	{"wf-12", "a new, identical action on purpose (new key)", []string{"wf-12"}, (*Runner).newKey},
	{"agent-3", "agent restarted between attempts", []string{"agent-3"}, (*Runner).restarted},
	{"status", "status of a disputed write", []string{"agent-1"}, (*Runner).disputedStatus},
	{"concurrency", "two actions in one concurrency group at once", []string{}, (*Runner).concurrencyGroup},
}

// Checks lists the checks' ids and names, in the order they run.
func Checks() [][2]string {
	out := make([][2]string, len(checks))
	for i, c := range checks {
		out[i] = [2]string{c.id, c.name}
	}
	return out
}

// judged counts the target's effects around act and judges the growth
// against expected; act returns the requests it sent and the answer it
// finished on, for the findings that read answers.
func (r *Runner) judged(ctx context.Context, expected int64, act func() (int, answer)) (Result, answer) {
	before, err := r.effects(ctx)
	if err != nil {
		return Result{Verdict: FailedCheck, Finding: FindingError, Reason: err.Error()}, answer{}
	}
	requests, last := act()
	got, err := r.settle(ctx, before)
	res := Result{Requests: requests, Effects: got, Expected: expected}
	switch {
	case err != nil:
		res.Verdict, res.Finding, res.Reason = FailedCheck, FindingError, err.Error()
	case got > expected:
		res.Verdict, res.Finding = FailedCheck, FindingDuplicate
		res.Reason = fmt.Sprintf("%d effects for %d intended", got, expected)
	case got < expected:
		res.Verdict, res.Finding = FailedCheck, FindingMissing
		res.Reason = fmt.Sprintf("%d effects, %d intended: an action was lost or merged", got, expected)
	default:
		res.Verdict, res.Reason = Passed, fmt.Sprintf("%d effect(s), as intended", got)
	}
	return res, last
}

func ok(a answer) bool { return a.err == nil && a.status >= 200 && a.status < 300 }

// retry sends a until it gets a final answer, waiting as a careful agent
// does: Retry-After, or a second, on 409, 425, 429 and 503, and on no
// answer at all. It returns the requests sent and the last answer.
func (r *Runner) retry(ctx context.Context, a action, tries int) (int, answer) {
	return r.retryWith(ctx, r.client, a, tries)
}

// retryWith is retry with the client c.
func (r *Runner) retryWith(ctx context.Context, c *http.Client, a action, tries int) (int, answer) {
	var last answer
	for i := 1; i <= tries; i++ {
		last = r.sendWith(ctx, c, a)
		if last.err == nil && !waitable(last.status) {
			return i, last
		}
		wait := time.Second
		if last.err == nil {
			if s, err := strconv.Atoi(last.header.Get("Retry-After")); err == nil && s >= 0 && s <= 10 {
				wait = time.Duration(s) * time.Second
			}
		}
		if i < tries {
			time.Sleep(wait)
		}
	}
	return tries, last
}

func waitable(status int) bool {
	return status == 409 || status == 425 || status == 429 || status == 503
}

// lostAnswer marks a result whose retry never got the answer.
func lostAnswer(res Result, last answer) Result {
	if res.Verdict == Passed && !ok(last) {
		res.Verdict, res.Finding = FailedCheck, FindingLostAnswer
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

// notApplicable is a check that cannot apply, and why.
func notApplicable(why string) Result { return Result{Verdict: NotApplicable, Reason: why} }
