package agent

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control/client"
	"github.com/idemgate/idemgate/ledger"
)

// maxBody bounds an answer the client reads.
const maxBody = 4 << 20

// run sends the entry's request until the policy is done with it.
func (c *Client) run(ctx context.Context, e *Entry, body []byte) (Outcome, error) {
	r, err := c.newRun(ctx, e, body)
	if err != nil {
		return r.out, err
	}
	clk := c.clock()
	start := clk.Now()
	for n := 1; ; {
		began := clk.Now()
		a, err := r.try(ctx)
		if err == nil {
			err = r.settle(ctx, a)
		}
		if err != nil || r.s == stepDone || ctx.Err() != nil {
			return r.out, cmp.Or(err, ctx.Err())
		}
		if r.s == stepWaitApproval { // its own budget: a human's time is not the retry policy's
			pause, ok := r.approvalPause(began, a)
			if !ok {
				r.out.Reason += fmt.Sprintf("; no decision within the approval wait (%s)", r.p.ApprovalWait)
				return r.out, nil // still needs approval; a resume waits on with the same key
			}
			r.waited += clk.Now().Sub(began) + pause
			if pause > 0 {
				if err := clk.Sleep(ctx, pause); err != nil {
					return r.out, err
				}
			}
			continue
		}
		delay := max(r.p.backoff(n, clk.Random), a.retryAfter)
		if n >= r.p.MaxAttempts || clk.Now().Add(delay).Sub(start)-r.waited > r.p.MaxElapsed {
			tries := "tries"
			if n == 1 {
				tries = "try"
			}
			r.out.Reason += fmt.Sprintf("; gave up after %d %s (the retry budget)", n, tries)
			return r.out, nil // the last kind stands
		}
		if err := clk.Sleep(ctx, delay); err != nil {
			return r.out, err
		}
		n++
	}
}

// maxApprovalWait bounds the Prefer: wait of one request that waits for a
// human's decision (the gateway's own cap, by default).
const maxApprovalWait = time.Minute

// approvalPause is the pause before the next request that waits for the
// human's decision, and sets the wait that request asks for; ok is false
// once Policy.ApprovalWait is spent. There is no pause after a request the
// gateway held (it did the waiting), and a growing one after a waiting
// request it answered at once (a gateway that does not hold, or a new
// approval just opened), so that the client never spins on it.
func (r *runState) approvalPause(began time.Time, a attempt) (pause time.Duration, ok bool) {
	clk := r.c.clock()
	now := clk.Now()
	if r.approvalBy.IsZero() {
		r.approvalBy = now.Add(r.p.ApprovalWait)
	}
	if r.waitSent && now.Sub(began) < time.Second {
		r.polls++
		pause = max(r.p.backoff(r.polls, clk.Random), a.retryAfter)
	} else {
		r.polls = 0
	}
	w := r.c.clampWait(min(r.approvalBy.Sub(now.Add(pause)), maxApprovalWait)).Truncate(time.Second)
	if w < time.Second {
		return 0, false
	}
	r.nextWait = w
	return pause, true
}

// runState is one Do call: what it sends, what the gateway last said of
// the operation, and what the policy does next.
type runState struct {
	c        *Client
	e        *Entry
	body     []byte
	p        Policy
	s        step
	stale    bool   // sent longer ago than the gateway's retention: see reconcile
	informed Kind   // the last thing the gateway said of the operation
	why      string // and its reason, in words
	kind     Kind   // what the current try came to
	num      int    // the current try's attempt number (0: the gateway was only asked)
	out      Outcome
	approval *ApprovalInfo // the approval the gateway named with what it last said (informed)

	// Waiting for a human's decision (Policy.ApprovalWait).
	approvalBy time.Time     // when the wait is spent (set at its first pause)
	nextWait   time.Duration // the Prefer: wait of the next waiting request
	waitSent   bool          // the current try's request waited for the decision
	polls      int           // waiting requests in a row the gateway answered at once
	waited     time.Duration // time spent waiting, not counted against MaxElapsed
}

// newRun starts a run where the journal left the intent: a resume first
// asks the gateway what became of it.
func (c *Client) newRun(ctx context.Context, e *Entry, body []byte) (*runState, error) {
	r := &runState{c: c, e: e, body: body, p: c.Policy.withDefaults(), s: stepRetry, informed: e.LastKind,
		out: Outcome{Intent: e.Intent, Version: e.Version, Key: e.Key, OperationID: e.OperationID,
			Attempts: e.Attempts, Kind: e.LastKind, Status: e.LastStatus, Sent: e.Sent}}
	r.p.Wait = c.clampWait(r.p.Wait)
	if e.Attempts > 0 {
		r.s = stepAsk
		last, err := c.Journal.lastSentAttempt(ctx, e.Key)
		if err != nil {
			return r, err
		}
		r.stale = !last.IsZero() && time.Since(last) >= r.p.GatewayRetention
	}
	return r, nil
}

// try asks or sends once, as the policy's step says.
func (r *runState) try(ctx context.Context) (attempt, error) {
	var a attempt
	r.kind, r.num = r.informed, 0
	var err error
	if r.s == stepAsk {
		if r.s, r.kind, err = r.c.reconcile(ctx, r.e.Key, r.out, r.stale, &a); err != nil {
			return a, err
		}
	}
	r.waitSent = false
	if r.s == stepRetry || r.s == stepWaitStatus || r.s == stepWaitApproval {
		// Prefer: wait only to wait: the gateway holds any request that
		// meets a pending approval for its decision, the first one too, so
		// a plain send asks for none and a 202 comes back at once.
		var wait time.Duration
		switch r.s {
		case stepWaitStatus:
			wait = r.p.Wait
		case stepWaitApproval:
			wait, r.waitSent = r.nextWait, true
		}
		if r.num, err = r.c.Journal.beginAttempt(ctx, r.e.Key); err != nil { // written before it is sent
			return a, err
		}
		a = r.c.send(ctx, r.e, r.body, wait)
		r.stale = false // this attempt is recent
		if r.s, r.kind = decide(a); r.s == stepReconcile {
			r.s, r.kind, err = r.c.reconcile(ctx, r.e.Key, r.out, false, &a)
		}
	}
	if r.s == stepDone && r.kind == NeedsApproval && r.p.ApprovalWait > 0 {
		r.s = stepWaitApproval // the same request, the same key, waiting for the decision
	}
	return a, err
}

// settle records what the try came to, and makes the outcome the
// journal's word.
func (r *runState) settle(ctx context.Context, a attempt) error {
	// An answer informs when the gateway said something of the operation:
	// a "not now" or an unreachable gateway does not, and then the last
	// thing it did say stands.
	reached := (r.num > 0 && !transient(a)) || (r.num == 0 && a.asked)
	r.out.fill(a, r.kind, r.num, reached)
	if a.code == contract.CodeApprovalDenied && r.approval != nil {
		r.out.Reason = join(r.out.Reason, "the approval it waited for was "+r.approval.what())
	}
	if reached {
		r.informed, r.why, r.approval = r.kind, r.out.Reason, r.out.Approval
	} else if r.informed != "" {
		r.out.Kind, r.out.Approval = r.informed, r.approval
		before := "the journal last recorded " + string(r.informed)
		if r.why != "" {
			before = "before that, " + r.why
		}
		r.out.Reason = join(r.out.Reason, before)
	}
	e, err := r.c.Journal.record(context.WithoutCancel(ctx), r.e.Key, r.num, r.out, reached, a.delivery())
	if err != nil {
		return err
	}
	r.out.adopt(e)
	r.out.Unfinished = r.s != stepDone || a.lookupErr != nil
	return nil
}

// clampWait keeps Prefer: wait under the client's own timeout, so that a
// wait for an in-flight operation ends in an answer, not a timeout.
func (c *Client) clampWait(w time.Duration) time.Duration {
	if t := c.httpClient().Timeout; t > 0 && w > t/2 {
		return t / 2
	}
	return w
}

// fill takes in what one try came to. Status and body are those of the
// last answer that told something of the operation, as the kind is; a
// lookup alone (num 0) is no answer to the write, and keeps them.
func (o *Outcome) fill(a attempt, kind Kind, num int, reached bool) {
	o.Kind, o.Reason, o.Expired, o.Approval = kind, a.reason(), a.expired, a.approval
	if reached && num > 0 {
		o.Status, o.Body, o.Header = a.status, a.body, a.header
	}
	if num > 0 {
		o.Attempts = num
	}
	if id := a.header.Get(contract.HeaderOperation); id != "" {
		o.OperationID = id
	}
}

// adopt makes the outcome the journal's word, which can say more than this
// call saw: an answer another process recorded, or an earlier attempt that
// may have been applied.
func (o *Outcome) adopt(e *Entry) {
	if e.LastKind != o.Kind {
		o.Body, o.Header, o.Approval = nil, nil, nil
		if e.LastKind == Unknown {
			o.Reason += "; an earlier attempt may have reached the gateway, and its answer was never recorded"
		} else {
			o.Reason += fmt.Sprintf("; an earlier answer already said %s", e.LastKind)
		}
	}
	o.Kind, o.Status, o.OperationID, o.Sent = e.LastKind, e.LastStatus, e.OperationID, e.Sent
}

// send sends one attempt, with the intent's key, asking the gateway to
// wait up to wait (whole seconds; none under one) for an operation in
// flight or a human's decision.
func (c *Client) send(ctx context.Context, e *Entry, body []byte, wait time.Duration) attempt {
	var a attempt
	sent := new(atomic.Bool)
	trace := &httptrace.ClientTrace{WroteHeaders: func() { sent.Store(true) }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), e.Method,
		strings.TrimSuffix(c.BaseURL, "/")+e.Path, bytes.NewReader(body))
	if err != nil {
		return attempt{err: err}
	}
	c.identify(req)
	req.Header.Set(contract.HeaderKey, e.Key)
	if wait >= time.Second {
		req.Header.Set(contract.HeaderPrefer, fmt.Sprintf("wait=%d", int(wait.Seconds())))
	}
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.httpClient().Do(req)
	a.sent = sent.Load()
	if err != nil {
		a.err = err
		return a
	}
	defer resp.Body.Close()
	a.status, a.header = resp.StatusCode, resp.Header
	if a.body, err = io.ReadAll(io.LimitReader(resp.Body, maxBody)); err != nil {
		a.err = fmt.Errorf("the answer was cut: %w", err)
		return a
	}
	a.retryAfter = retryAfter(resp.Header, c.clock().Now())
	a.code = problemCode(resp.Header, a.body)
	if a.status == http.StatusAccepted {
		a.approval, a.accepted = accepted(a.body)
	}
	return a
}

// identify sets what every request of the client carries: its token and
// the agent run it is part of.
func (c *Client) identify(req *http.Request) {
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set(contract.HeaderRun, c.runID())
}

// problemCode is an answer's problem code, if it is a problem.
func problemCode(h http.Header, body []byte) string {
	p, _ := contract.ReadProblem(h, body)
	return p.Code
}

// opView is the gateway's view of an operation (contract.View, without its
// history), and the bytes it came in.
type opView struct {
	contract.Summary
	raw json.RawMessage
}

// approval is the approval the view names, nil if none.
func (v opView) approval() *ApprovalInfo { return approvalOf(v.Approval) }

// awaitsApproval says the operation waits for a human's decision at now:
// prepared with a pending approval that has not lapsed. One that lapsed
// undecided still reads pending until a request opens a new one.
func (v opView) awaitsApproval(now time.Time) bool {
	ap := v.approval()
	return v.State == ledger.Prepared && ap != nil && ap.Status == ledger.ApprovalPending && !ap.Lapsed(now)
}

// lookup asks the gateway's control API (its typed client, as the
// agent's principal and run) for the operation under key; a nil raw means
// it has none (a not_found problem: any other answer is an error, never
// taken for "not applied").
func (c *Client) lookup(ctx context.Context, key string) (opView, error) {
	cl, err := client.New(c.BaseURL, c.Token, client.WithHTTPClient(c.httpClient()),
		client.WithHeader(contract.HeaderRun, c.runID()))
	if err != nil {
		return opView{}, err
	}
	v, raw, err := cl.OperationByKey(ctx, key)
	var p *contract.Problem
	var se *client.StatusError
	switch {
	case client.IsNotFound(err):
		return opView{}, nil
	case errors.As(err, &p):
		return opView{}, fmt.Errorf("its lookup %s", attempt{status: p.Status, code: p.Code,
			body: []byte(`{"detail":` + strconv.Quote(p.Detail) + `}`), header: http.Header{}}.answer())
	case errors.As(err, &se):
		return opView{}, fmt.Errorf("its lookup %s", attempt{status: se.Status, header: http.Header{}}.answer())
	case err != nil:
		return opView{}, err
	}
	return opView{Summary: v.Summary, raw: raw}, nil
}

// reconcile asks the gateway about the operation under key, after an
// answer lost once the request was sent, or before resuming an intent that
// was sent before. It sends again only when the gateway says the operation
// was not applied (none, or prepared) or is final (the resend is then
// answered from its record, which is how the stored answer is fetched).
// An operation the gateway held once (known is the outcome so far) and no
// longer holds has outlived its retention: sending it again would perform
// it again, so it is not sent; nor is an intent with no operation id seen
// whose last attempt is older than the retention (stale), since "none"
// may then mean "performed and purged".
func (c *Client) reconcile(ctx context.Context, key string, known Outcome, stale bool, a *attempt) (step, Kind, error) {
	v, err := c.lookup(ctx, key)
	a.note, a.asked, a.lookupErr = "", err == nil, err
	if err != nil {
		if known.Kind.Final() && !a.sent { // a resume of a settled intent: the journal's word stands
			return stepDone, known.Kind, nil
		}
		return stepAsk, Unknown, nil // ask again later; never resend unasked
	}
	if a.found = v.raw != nil; a.found {
		a.header = http.Header{contract.HeaderOperation: {v.ID}}
		s, k := judge(v, a, c.clock().Now())
		return s, k, c.Journal.settle(ctx, key, SentYes)
	}
	switch {
	case known.OperationID != "":
		s, k := expired(known, a)
		return s, k, nil
	case stale:
		a.expired = true
		a.note = "sent more than the gateway's retention ago with no answer recorded, and the gateway holds " +
			"nothing now: it may have been performed and purged, so it is not sent again. Check the upstream " +
			"by hand; if the action is still needed, name a new intent"
		return stepDone, Unknown, nil
	}
	a.note = "the gateway holds nothing under this key: it was not applied"
	return stepRetry, Failed, c.Journal.settle(ctx, key, SentNo)
}

// judge is what the gateway's view of an operation it holds means: it is
// sent again when not applied, or when final (the resend is answered from
// its record, which is how the stored answer is fetched). A prepared one
// whose approval is pending waits for a human, and is not sent; one whose
// approval lapsed is sent, which opens a new one; one approved is sent,
// which runs it.
func judge(v opView, a *attempt, now time.Time) (step, Kind) {
	a.approval = v.approval()
	switch ap := a.approval; {
	case v.State == ledger.Prepared && ap == nil:
		a.note = "the gateway holds it not applied (released)"
		return stepRetry, Failed
	case v.State == ledger.Prepared && ap.Lapsed(now):
		a.note = ap.lapsedNote()
		return stepRetry, NeedsApproval
	case v.awaitsApproval(now):
		a.note = "it waits for a human's approval at the gateway: " + ap.waiting()
		return stepDone, NeedsApproval
	case v.State == ledger.Prepared:
		a.note = fmt.Sprintf("the gateway holds it not applied, and its approval is %s: sending it again (the same "+
			"key) runs it", ap.Status)
		return stepRetry, Failed
	case v.State == "succeeded":
		a.note = "the gateway says it succeeded"
		return stepRetry, Replayed
	case v.State == "failed":
		a.note = "the gateway says it failed"
		return stepRetry, Failed
	case v.State == "executing":
		a.note = "it is still executing at the gateway"
		return stepWaitStatus, InProgress
	}
	a.note = fmt.Sprintf("the gateway holds it %s: it may have been applied", v.State)
	return stepDone, Unknown
}

// expired answers for an operation the gateway no longer holds: its
// retention passed. Nothing is sent: the gateway would perform it anew. A
// settled intent stays what the journal last saw; only one that may still
// have taken effect becomes unknown.
func expired(known Outcome, a *attempt) (step, Kind) {
	a.expired = true
	switch {
	case known.Kind == Created || known.Kind == Replayed:
		a.note = fmt.Sprintf("done; the gateway no longer holds operation %s (its retention has passed), so "+
			"its answer cannot be replayed; use repeat for a new, identical action", known.OperationID)
		return stepDone, known.Kind
	case known.Kind.Final():
		a.note = fmt.Sprintf("the gateway no longer holds operation %s (its retention has passed) and this journal "+
			"last saw it %s: it is not sent again; a new action needs repeat or revise", known.OperationID, known.Kind)
		return stepDone, known.Kind
	}
	a.note = fmt.Sprintf("the gateway no longer holds operation %s (its retention has passed) and this journal last "+
		"saw it %s: it is not sent again. Check the upstream by hand; if the action is still needed, name a new intent",
		known.OperationID, known.Kind)
	return stepDone, Unknown
}
