package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/idemgate/idemgate/contract"
)

// PaymentUnknown: a capture times out between the gateway and the
// provider, so its outcome is unknown and retries are refused rather than
// re-sent; an operator looks at the provider and resolves it with the CLI,
// and the agent's retry gets the resolution.
func PaymentUnknown(ctx context.Context, e *Env, s *State) error {
	c, err := CaptureUnknown(ctx, e, s)
	if err != nil {
		return err
	}
	return ResolveCapture(ctx, e, s, c)
}

// Capture is a capture CaptureUnknown left unknown.
type Capture struct {
	Order, Path, Key, OpID string
}

// CaptureUnknown creates a payment intent and captures it while the
// provider is slower than the gateway's timeout: 504 outcome_unknown, then
// 409 outcome_unknown on the retry, never re-sent.
func CaptureUnknown(ctx context.Context, e *Env, s *State) (Capture, error) {
	c := Capture{Order: s.Key("ord"), Key: s.Key("capture")}
	intent, err := e.Post(ctx, s, "/v1/payment-intents", s.Key("intent"), fmt.Sprintf(
		`{"order_id":%q,"amount_minor":12900,"currency":"EUR","payee":"ACME SAS","invoice_ref":"INV-%s"}`, c.Order, s.Run))
	if err != nil || intent.Status != 201 {
		return c, fmt.Errorf("payment intent: %v %d %s", err, intent.Status, intent.Body)
	}
	c.Path = fmt.Sprintf("/v1/payment-intents/%d/capture", intent.ID())
	if err := e.Fault(ctx, `{"delay_ms":2500}`); err != nil {
		return c, err
	}
	e.Say("POST %s  (129.00 EUR; the provider takes 2.5s, the gateway waits 2s)", c.Path)
	r, err := e.Post(ctx, s, c.Path, c.Key, `{}`)
	if err := e.Fault(ctx, `{"delay_ms":0}`); err != nil {
		return c, err
	}
	if err != nil || r.Status != 504 || r.Problem().Code != contract.CodeOutcomeUnknown {
		return c, fmt.Errorf("capture: %v %d %s", err, r.Status, r.Body)
	}
	e.Say("-> 504 %s: the request was sent, its answer lost", contract.CodeOutcomeUnknown)
	if r, err = e.Post(ctx, s, c.Path, c.Key, `{}`); err != nil {
		return c, err
	}
	if r.Status != 409 || r.Problem().Code != contract.CodeOutcomeUnknown {
		return c, fmt.Errorf("retry: %d %s", r.Status, r.Body)
	}
	e.Say("agent retries -> 409 %s: not re-sent, so never charged twice", contract.CodeOutcomeUnknown)
	c.OpID = r.Header.Get(contract.HeaderOperation)
	return c, nil
}

// ResolveCapture is the operator's part: check the provider, then say what
// happened with idemgate ops resolve; the agent's retry replays it.
func ResolveCapture(ctx context.Context, e *Env, s *State, c Capture) error {
	captured, err := e.capturedFor(ctx, c.Order)
	if err != nil {
		return err
	}
	e.Say("the operator looks the order up at the provider: %d.%02d EUR captured", captured/100, captured%100)
	note := fmt.Sprintf("provider shows %s captured once", c.Order)
	args := []string{"ops", "resolve", c.OpID, "--store", e.StoreDSN, "--state", "succeeded", "--note", note,
		"--actor", "operator:" + e.Tenant}
	s.CaptureOp = c.OpID
	e.Say("$ idemgate %s", strings.Join(quoteArgs(args), " "))
	if _, err := e.CLI(ctx, args...); err != nil {
		return err
	}
	r, err := e.Post(ctx, s, c.Path, c.Key, `{}`)
	if err != nil || r.Status != 200 || !r.Replayed() {
		return fmt.Errorf("retry after resolution: %v %d %s", err, r.Status, r.Body)
	}
	e.Say("agent retries -> 200, %s: true, state succeeded", contract.HeaderReplayed)
	return nil
}

// capturedFor waits for the provider to show the late capture of order.
func (e *Env) capturedFor(ctx context.Context, order string) (int64, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := e.send(ctx, nil, 5*time.Second, "GET", e.APIURL+"/v1/payment-intents?order_id="+url.QueryEscape(order), "", "")
		if err != nil {
			return 0, err
		}
		var v struct {
			PaymentIntents []struct {
				Captured int64 `json:"captured_minor"`
			} `json:"payment_intents"`
		}
		if err := json.Unmarshal([]byte(r.Body), &v); err == nil && len(v.PaymentIntents) == 1 && v.PaymentIntents[0].Captured > 0 {
			return v.PaymentIntents[0].Captured, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("order %s: no capture at the provider: %s", order, r.Body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if strings.ContainsAny(a, " '\"") {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return out
}
