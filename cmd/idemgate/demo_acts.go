package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

func demoTicket(title, event string) string {
	src := ""
	if event != "" {
		src = fmt.Sprintf(`,"source_event_id":%q`, event)
	}
	return fmt.Sprintf(`{"project":"OPS","title":%q,"priority":2,"description":"opened by the agent"%s}`, title, src)
}

func demoLostAnswer(ctx context.Context, e *demoEnv, s *demoState) error {
	if err := e.fault(ctx, `{"delay_ms":1500}`); err != nil {
		return err
	}
	s.ticketKey, s.ticketBody = "ticket-"+s.run, demoTicket("Disk full on db-1", "")
	e.say("POST /v1/tickets  Idempotency-Key: %s   (the API takes 1.5s today)", s.ticketKey)
	_, err := e.send(ctx, s, 500*time.Millisecond, "POST", e.gwURL+"/v1/tickets", s.ticketBody,
		"Idempotency-Key", s.ticketKey)
	if err == nil {
		return errors.New("the first attempt should have timed out")
	}
	e.say("-> no answer after 0.5s: the agent cannot tell whether the ticket exists")
	if err := e.fault(ctx, `{"delay_ms":0}`); err != nil {
		return err
	}
	r, err := e.post(ctx, s, "/v1/tickets", s.ticketKey, s.ticketBody, "Prefer", "wait=10")
	if err != nil {
		return err
	}
	if r.status != 201 || !r.replayed() {
		return fmt.Errorf("the retry got %d (replayed %t): %s", r.status, r.replayed(), r.body)
	}
	e.say("retry, same key -> 201, Idempotent-Replayed: true: the stored answer, ticket #%d", r.id())
	return nil
}

func demoChangedPayload(ctx context.Context, e *demoEnv, s *demoState) error {
	body := strings.Replace(s.ticketBody, "Disk full on db-1", "Rotate the TLS certificates", 1)
	e.say("POST /v1/tickets  Idempotency-Key: %s   (same key, another title)", s.ticketKey)
	r, err := e.post(ctx, s, "/v1/tickets", s.ticketKey, body)
	if err != nil {
		return err
	}
	code, detail := r.problem()
	if r.status != 422 || code != "fingerprint_mismatch" {
		return fmt.Errorf("got %d %s: %s", r.status, code, r.body)
	}
	e.say("-> 422 %s: %s", code, detail)
	return nil
}

func demoConcurrent(ctx context.Context, e *demoEnv, s *demoState) error {
	if err := e.fault(ctx, `{"delay_ms":300}`); err != nil {
		return err
	}
	defer e.fault(ctx, `{"delay_ms":0}`)
	const n = 50
	key, body := "storm-"+s.run, demoTicket("Queue backlog over 10k", "")
	e.say("50 x POST /v1/tickets  Idempotency-Key: %s   (Prefer: wait=10)", key)
	p := &progress{out: e.out, tty: e.tty, total: n}
	replies, errs := make([]demoReply, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i], errs[i] = e.send(ctx, nil, 20*time.Second, "POST", e.gwURL+"/v1/tickets", body,
				"Idempotency-Key", key, "Prefer", "wait=10")
			p.tick()
		}()
	}
	wg.Wait()
	s.requests += n
	replays := 0
	for i, r := range replies {
		if errs[i] != nil || r.status != 201 || r.body != replies[0].body {
			return fmt.Errorf("answer %d: %d %v %s", i, r.status, errs[i], r.body)
		}
		if r.replayed() {
			replays++
		}
	}
	e.say("-> 50 answers, all 201 with ticket #%d: %d executed, %d replayed", replies[0].id(), n-replays, replays)
	return nil
}

func demoDuplicateAlert(ctx context.Context, e *demoEnv, s *demoState) error {
	event := "evt-" + s.run
	first, err := e.post(ctx, s, "/v1/tickets", "alert-a-"+s.run, demoTicket("DB primary down", event))
	if err != nil {
		return err
	}
	e.say("alert 1, source_event_id %s: %q -> %d, ticket #%d", event, "DB primary down", first.status, first.id())
	dup, err := e.post(ctx, s, "/v1/tickets", "alert-b-"+s.run, demoTicket("Database primary is down!", event))
	if err != nil {
		return err
	}
	if first.status != 201 || dup.id() != first.id() || dup.header.Get("Idempotency-Duplicate-Of") == "" {
		return fmt.Errorf("duplicate: %d %s", dup.status, dup.body)
	}
	e.say("alert 2, same event, reworded, new key: %q -> ticket #%d again", "Database primary is down!", dup.id())
	e.say("   (Idempotency-Duplicate-Of: %s)", dup.header.Get("Idempotency-Duplicate-Of"))
	return nil
}

func demoMutableRef(ctx context.Context, e *demoEnv, s *demoState) error {
	deploy := func(key, artifact string) (demoReply, error) {
		return e.post(ctx, s, "/v1/deployments", key,
			fmt.Sprintf(`{"service":"billing","environment":"staging","artifact":%q}`, artifact))
	}
	r, err := deploy("deploy-main-"+s.run, "main")
	if err != nil {
		return err
	}
	var refusal struct{ Error string }
	_ = jsonUnmarshal(r.body, &refusal)
	if r.status != 422 {
		return fmt.Errorf("artifact main: %d %s", r.status, r.body)
	}
	e.say("artifact main -> 422: %s", refusal.Error)
	digest := "sha256:4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b"
	if r, err = deploy("deploy-digest-"+s.run, digest); err != nil {
		return err
	}
	if r.status != 201 {
		return fmt.Errorf("artifact digest: %d %s", r.status, r.body)
	}
	e.say("artifact %s... -> 201, deployment #%d started", digest[:19], r.id())
	return nil
}

func demoPaymentUnknown(ctx context.Context, e *demoEnv, s *demoState) error {
	order := "ord-" + s.run
	intent, err := e.post(ctx, s, "/v1/payment-intents", "intent-"+s.run, fmt.Sprintf(
		`{"order_id":%q,"amount_minor":12900,"currency":"EUR","payee":"ACME SAS","invoice_ref":"INV-%s"}`, order, s.run))
	if err != nil || intent.status != 201 {
		return fmt.Errorf("payment intent: %v %d %s", err, intent.status, intent.body)
	}
	path, key := fmt.Sprintf("/v1/payment-intents/%d/capture", intent.id()), "capture-"+s.run
	if err := e.fault(ctx, `{"delay_ms":2500}`); err != nil {
		return err
	}
	e.say("POST %s  (129.00 EUR; the provider takes 2.5s, the gateway waits 2s)", path)
	r, err := e.post(ctx, s, path, key, `{}`)
	if err := e.fault(ctx, `{"delay_ms":0}`); err != nil {
		return err
	}
	code, _ := r.problem()
	if err != nil || r.status != 504 || code != "outcome_unknown" {
		return fmt.Errorf("capture: %v %d %s", err, r.status, r.body)
	}
	e.say("-> 504 outcome_unknown: the request was sent, its answer lost")
	if r, err = e.post(ctx, s, path, key, `{}`); err != nil {
		return err
	}
	if code, _ = r.problem(); r.status != 409 || code != "outcome_unknown" {
		return fmt.Errorf("retry: %d %s", r.status, r.body)
	}
	e.say("agent retries -> 409 outcome_unknown: not re-sent, so never charged twice")
	return e.reconcile(ctx, s, r.header.Get("Idempotency-Operation"), order, path, key)
}

// reconcile is the operator's part: check the provider, then say what
// happened with idemgate ops resolve, and the agent's retry replays it.
func (e *demoEnv) reconcile(ctx context.Context, s *demoState, opID, order, path, key string) error {
	captured, err := e.capturedFor(ctx, order)
	if err != nil {
		return err
	}
	e.say("the operator looks the order up at the provider: %d.%02d EUR captured", captured/100, captured%100)
	note := fmt.Sprintf("provider shows %s captured once", order)
	args := []string{"ops", "resolve", opID, "--store", e.storeDSN, "--state", "succeeded", "--note", note,
		"--actor", "operator:demo"}
	s.captureOp = opID
	e.say("$ idemgate %s", strings.Join(quoteArgs(args), " "))
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(io.Discard)
	if err := root.ExecuteContext(ctx); err != nil {
		return err
	}
	r, err := e.post(ctx, s, path, key, `{}`)
	if err != nil || r.status != 200 || !r.replayed() {
		return fmt.Errorf("retry after resolution: %v %d %s", err, r.status, r.body)
	}
	e.say("agent retries -> 200, Idempotent-Replayed: true, state succeeded")
	return nil
}

// capturedFor waits for the provider to show the late capture of order.
func (e *demoEnv) capturedFor(ctx context.Context, order string) (int64, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := e.send(ctx, nil, 5*time.Second, "GET", e.apiURL+"/v1/payment-intents?order_id="+order, "")
		if err != nil {
			return 0, err
		}
		var v struct {
			PaymentIntents []struct {
				Captured int64 `json:"captured_minor"`
			} `json:"payment_intents"`
		}
		if err := jsonUnmarshal(r.body, &v); err == nil && len(v.PaymentIntents) == 1 && v.PaymentIntents[0].Captured > 0 {
			return v.PaymentIntents[0].Captured, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("order %s: no capture at the provider: %s", order, r.body)
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
