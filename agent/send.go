package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// maxBody bounds an answer the client reads.
const maxBody = 4 << 20

// run sends the entry's request until the policy is done with it.
func (c *Client) run(ctx context.Context, e *Entry, body []byte) (Outcome, error) {
	p, clk := c.Policy.withDefaults(), c.clock()
	p.Wait = c.clampWait(p.Wait)
	start := clk.Now()
	out := Outcome{Intent: e.Intent, Version: e.Version, Key: e.Key, OperationID: e.OperationID, Attempts: e.Attempts,
		Kind: e.LastKind}
	informed := e.LastKind // the last thing the gateway said of the operation
	var a attempt
	s, stale := stepRetry, false
	if e.Attempts > 0 { // a resume: first ask the gateway what became of it
		s = stepAsk
		last, err := c.Journal.lastSentAttempt(ctx, e.Key)
		if err != nil {
			return out, err
		}
		stale = !last.IsZero() && time.Since(last) >= p.GatewayRetention // see reconcile
	}
	for n := 1; ; n++ {
		kind, num := informed, 0
		if s == stepAsk {
			a = attempt{}
			s, kind = c.reconcile(ctx, e.Key, out, stale, &a)
		}
		if s == stepRetry || s == stepWaitStatus {
			var err error
			if num, err = c.Journal.beginAttempt(ctx, e.Key); err != nil { // written before it is sent
				return out, err
			}
			a = c.send(ctx, e, body, p)
			stale = false // this attempt is recent
			if s, kind = decide(a); s == stepReconcile {
				s, kind = c.reconcile(ctx, e.Key, out, false, &a)
			}
		}
		// An answer informs when the gateway said something of the
		// operation: a "not now" or an unreachable gateway does not, and
		// then the last thing it did say stands.
		reached := (num > 0 && !transient(a)) || (num == 0 && a.asked)
		if reached {
			informed = kind
		} else if informed != "" {
			kind = informed
		}
		out.fill(a, kind, num)
		if _, err := c.Journal.record(context.WithoutCancel(ctx), e.Key, num, out, reached, a.delivery()); err != nil {
			return out, err
		}
		if s == stepDone || ctx.Err() != nil {
			return out, ctx.Err()
		}
		delay := max(p.backoff(n, clk.Random), a.retryAfter)
		if n >= p.MaxAttempts || clk.Now().Add(delay).Sub(start) > p.MaxElapsed {
			return out, nil // the budget is spent: the last kind stands
		}
		if err := clk.Sleep(ctx, delay); err != nil {
			return out, err
		}
	}
}

// clampWait keeps Prefer: wait under the client's own timeout, so that a
// wait for an in-flight operation ends in an answer, not a timeout.
func (c *Client) clampWait(w time.Duration) time.Duration {
	if t := c.httpClient().Timeout; t > 0 && w > t/2 {
		return t / 2
	}
	return w
}

func (o *Outcome) fill(a attempt, kind Kind, num int) {
	o.Kind, o.Status, o.Body, o.Header = kind, a.status, a.body, a.header
	if num > 0 {
		o.Attempts = num
	}
	if id := a.header.Get("Idempotency-Operation"); id != "" {
		o.OperationID = id
	}
	switch {
	case a.note != "":
		o.Detail = a.note
	case a.err != nil:
		o.Detail = a.err.Error()
	case a.code != "":
		var p struct{ Detail string }
		_ = json.Unmarshal(a.body, &p)
		o.Detail = p.Detail
	default:
		o.Detail = ""
	}
}

// send sends one attempt, with the intent's key.
func (c *Client) send(ctx context.Context, e *Entry, body []byte, p Policy) attempt {
	var a attempt
	sent := new(atomic.Bool)
	trace := &httptrace.ClientTrace{WroteHeaders: func() { sent.Store(true) }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), e.Method,
		strings.TrimSuffix(c.BaseURL, "/")+e.Path, bytes.NewReader(body))
	if err != nil {
		return attempt{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Idempotency-Key", e.Key)
	req.Header.Set("Prefer", fmt.Sprintf("wait=%d", int(p.Wait.Seconds())))
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
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		var p struct{ Code string }
		_ = json.Unmarshal(a.body, &p)
		a.code = p.Code
	}
	return a
}

// opView is the part of the gateway's operation view the client reads.
type opView struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Approval *struct {
		Status string `json:"status"`
	} `json:"approval"`
	raw json.RawMessage
}

func (v opView) awaitsApproval() bool { return v.Approval != nil && v.Approval.Status == "pending" }

// lookup asks the gateway for the operation under key; a nil raw means it
// has none.
func (c *Client) lookup(ctx context.Context, key string) (opView, error) {
	req, err := http.NewRequestWithContext(ctx, "GET",
		strings.TrimSuffix(c.BaseURL, "/")+"/_idem/v1/operations?key="+url.QueryEscape(key), nil)
	if err != nil {
		return opView{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return opView{}, fmt.Errorf("ask the gateway: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	switch {
	case err != nil:
		return opView{}, fmt.Errorf("ask the gateway: %w", err)
	case resp.StatusCode == http.StatusNotFound:
		return opView{}, nil
	case resp.StatusCode != http.StatusOK:
		return opView{}, fmt.Errorf("ask the gateway: %d %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	var v opView
	if err := json.Unmarshal(body, &v); err != nil {
		return opView{}, fmt.Errorf("ask the gateway: %w", err)
	}
	v.raw = body
	return v, nil
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
func (c *Client) reconcile(ctx context.Context, key string, known Outcome, stale bool, a *attempt) (step, Kind) {
	v, err := c.lookup(ctx, key)
	a.note, a.asked = "", err == nil
	if err != nil {
		if a.err != nil && a.sent {
			a.err = fmt.Errorf("the answer was lost (%v), and %w", a.err, err)
		} else {
			a.err = err
		}
		if known.Kind.Final() && !a.sent { // a resume of a settled intent: the journal's word stands
			return stepDone, known.Kind
		}
		return stepAsk, Unknown // ask again later; never resend unasked
	}
	if a.found = v.raw != nil; a.found {
		a.header = http.Header{"Idempotency-Operation": {v.ID}}
	}
	switch {
	case v.raw == nil && known.OperationID != "":
		return c.expired(known, a)
	case v.raw == nil && stale:
		a.note = "sent more than the gateway's retention ago with no answer recorded, and the gateway holds " +
			"nothing now: it may have been performed and purged, so it is not sent again. Check the upstream " +
			"by hand; if the action is still needed, name a new intent"
		return stepDone, Unknown
	case v.raw == nil:
		if err := c.Journal.settleUnsent(ctx, key); err != nil {
			a.err = err
			return stepAsk, Unknown
		}
		a.note = "not applied at the gateway: sending it (again) with the same key"
		return stepRetry, Failed
	case v.State == "prepared" && !v.awaitsApproval():
		a.note = "not applied at the gateway: sending it (again) with the same key"
		return stepRetry, Failed
	case v.State == "prepared":
		return stepDone, NeedsApproval
	case v.State == "succeeded":
		return stepRetry, Replayed
	case v.State == "failed":
		return stepRetry, Failed
	case v.State == "executing":
		return stepWaitStatus, InProgress
	}
	return stepDone, Unknown
}

// expired answers for an operation the gateway no longer holds: its
// retention passed. Nothing is sent: the gateway would perform it anew.
func (c *Client) expired(known Outcome, a *attempt) (step, Kind) {
	if known.Kind == Created || known.Kind == Replayed {
		a.note = fmt.Sprintf("done; the gateway no longer holds operation %s (its retention has passed), so "+
			"its answer cannot be replayed; use repeat for a new, identical action", known.OperationID)
		return stepDone, known.Kind
	}
	a.note = fmt.Sprintf("the gateway no longer holds operation %s (its retention has passed) and this journal last "+
		"saw it %s: it is not sent again. Check the upstream by hand; if the action is still needed, name a new intent",
		known.OperationID, known.Kind)
	return stepDone, Unknown
}
