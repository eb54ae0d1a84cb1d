package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control/client"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// actClient is the typed client of e's gateway as the holder of token.
func (e *env) actClient(token string) *client.Client {
	e.t.Helper()
	c, err := client.New(e.gw.URL, token)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// TestClientAct: the Go client's Act performs an effect once and replays
// it to every later call; an effect that says it was not performed is
// released and runs on the next call; an error that says nothing records
// unknown, never run again until an operator resolves it; a changed
// command, an approval and a denial each get the NextStep they call for.
func TestClientAct(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		e := newActionsEnv(t, db)
		c, ctx := e.actClient("agent-token"), context.Background()
		var effects atomic.Int32
		send := func(context.Context) (any, error) {
			return map[string]any{"message_id": "m-" + string(rune('0'+effects.Add(1)))}, nil
		}
		a := client.Action{Name: "support.reply.send", Key: client.KeyOf("test", "wf-1", "7"), Command: json.RawMessage(`{"ticket":"584"}`)}
		first, err := c.Act(ctx, a, send)
		if err != nil || first.Replayed || first.State != ledger.Succeeded || string(first.Result) != `{"message_id":"m-1"}` {
			t.Fatalf("first: %+v %v", first, err)
		}
		again, err := c.Act(ctx, a, send)
		if err != nil || !again.Replayed || again.OperationID != first.OperationID || string(again.Result) != `{"message_id":"m-1"}` || effects.Load() != 1 {
			t.Fatalf("replay: %+v %v, %d effects", again, err, effects.Load())
		}
		changed := a
		changed.Command = json.RawMessage(`{"ticket":"585"}`)
		if _, err := c.Act(ctx, changed, send); client.NextStep(err) != client.Stop || !isCode(err, contract.CodeFingerprintMismatch) || effects.Load() != 1 {
			t.Fatalf("a changed command: %v", err)
		}

		// Not performed: released, and the next call runs it.
		b := client.Action{Name: "support.reply.send", Key: "not-yet", Command: json.RawMessage(`{}`)}
		_, err = c.Act(ctx, b, func(context.Context) (any, error) { return nil, client.NotPerformed(errors.New("smtp refused")) })
		if client.NextStep(err) != client.Retry {
			t.Fatalf("not performed: %v", err)
		}
		if got, err := c.Act(ctx, b, send); err != nil || got.Replayed || effects.Load() != 2 {
			t.Fatalf("after a release: %+v %v", got, err)
		}

		// Unknown: never run again, until an operator resolves it.
		u := client.Action{Name: "support.reply.send", Key: "lost", Command: json.RawMessage(`{}`)}
		_, err = c.Act(ctx, u, func(context.Context) (any, error) { effects.Add(1); return nil, errors.New("connection reset") })
		var unk *client.OutcomeUnknown
		if !errors.As(err, &unk) || client.NextStep(err) != client.Settle {
			t.Fatalf("unknown: %v", err)
		}
		if _, err := c.Act(ctx, u, send); client.NextStep(err) != client.Settle || effects.Load() != 3 {
			t.Fatalf("again while unknown: %v, %d effects", err, effects.Load())
		}
		if _, err := e.actClient("alice-token").Resolve(ctx, unk.OperationID, contract.ResolveRequest{State: "succeeded",
			Note: "found in the SMTP log", Result: json.RawMessage(`{"message_id":"m-3"}`)}); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Act(ctx, u, send); err != nil || !got.Replayed || string(got.Result) != `{"message_id":"m-3"}` || effects.Load() != 3 {
			t.Fatalf("after the resolution: %+v %v", got, err)
		}

		// A definite failure is recorded and replayed.
		f := client.Action{Name: "support.reply.send", Key: "refused", Command: json.RawMessage(`{}`)}
		if got, err := c.Act(ctx, f, func(context.Context) (any, error) {
			return nil, client.Failed(map[string]string{"why": "no such address"})
		}); err != nil || got.State != ledger.Failed {
			t.Fatalf("failed: %+v %v", got, err)
		}
		if got, err := c.Act(ctx, f, send); err != nil || !got.Replayed || got.State != ledger.Failed || string(got.Result) != `{"why":"no such address"}` {
			t.Fatalf("failed, replayed: %+v %v", got, err)
		}

		// An approval: pending, then denied.
		r := client.Action{Name: "refund.pay", Key: "refund-1", Command: json.RawMessage(`{"amount_minor":500}`)}
		_, err = c.Act(ctx, r, send)
		var ap *client.ApprovalPending
		if !errors.As(err, &ap) || client.NextStep(err) != client.Approve || ap.Approval.ID == "" {
			t.Fatalf("approval: %v", err)
		}
		alice := e.actClient("alice-token")
		view, err := alice.Approval(ctx, ap.Approval.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := alice.Deny(ctx, ap.Approval.ID, contract.Decision{Fingerprint: view.Fingerprint, Note: "no"}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Act(ctx, r, send); client.NextStep(err) != client.Stop || !isCode(err, contract.CodeApprovalDenied) || effects.Load() != 3 {
			t.Fatalf("after a denial: %v, %d effects", err, effects.Load())
		}
	})
}

// TestClientActHeartbeats: an effect longer than a third of its lease
// keeps it, through heartbeats, and is recorded.
func TestClientActHeartbeats(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		e := newActionsEnv(t, db)
		c, ctx := e.actClient("agent-token"), context.Background()
		a := client.Action{Name: "support.reply.send", Key: "long", Command: json.RawMessage(`{}`)}
		got, err := c.Act(ctx, a, func(context.Context) (any, error) {
			ops := e.operations()
			first := ops[0].LeaseUntil
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if op, _ := e.store.Get(ctx, ops[0].ID); op != nil && op.LeaseUntil.After(first) {
					return "done", nil // a heartbeat extended the lease
				}
			}
			return nil, client.NotPerformed(errors.New("no heartbeat came"))
		})
		if err != nil || got.State != ledger.Succeeded || string(got.Result) != `"done"` {
			t.Fatalf("%+v %v", got, err)
		}
	})
}

// TestKeyOf: parts cannot pass for one another, the key is printable
// ASCII, and a long one is hashed to a bounded, stable key.
func TestKeyOf(t *testing.T) {
	if a, b := client.KeyOf("t", "a/b", "c"), client.KeyOf("t", "a", "b/c"); a == b {
		t.Fatalf("%q == %q", a, b)
	}
	if k := client.KeyOf("t", "wf é \"x\"", "1"); k != "t/wf%20%C3%A9%20%22x%22/1" {
		t.Fatalf("escaped: %q", k)
	}
	long := client.KeyOf("temporal", strings.Repeat("w", 300), "1")
	if len(long) > client.MaxKey || !strings.HasPrefix(long, "temporal/sha256:") || long != client.KeyOf("temporal", strings.Repeat("w", 300), "1") {
		t.Fatalf("long: %q", long)
	}
}

func isCode(err error, code string) bool {
	var p *contract.Problem
	return errors.As(err, &p) && p.Code == code
}
