package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// intentFor creates a payment intent and returns its capture's path.
func (d *drill) intentFor(order string) string {
	d.t.Helper()
	r := d.keyed("/v1/payment-intents", "pi-"+order, fmt.Sprintf(
		`{"order_id":%q,"amount_minor":12900,"currency":"EUR","payee":"ACME SAS","invoice_ref":"INV-%s"}`, order, order))
	var in struct{ ID int64 }
	if err := json.Unmarshal([]byte(r.body), &in); err != nil || r.status != 201 {
		d.t.Fatalf("intent: %+v", r)
	}
	return fmt.Sprintf("/v1/payment-intents/%d/capture", in.ID)
}

// settled waits for the reconciler to move the operation of key out of
// unknown, and returns it.
func (d *drill) settled(key string) *ledger.Operation {
	d.t.Helper()
	var op *ledger.Operation
	waitFor(d.t, "the reconciler's verdict on "+key, func() bool {
		op = d.operation(key)
		return op.State != ledger.Unknown
	})
	return op
}

// TestDrillReconcileCaptureApplied: a capture whose answer is lost (the
// provider took longer than the gateway waits) is unknown; the probe
// finds it captured, and the operation succeeds with the probe's answer as
// its replay, marked reconciled. No second capture is ever sent.
func TestDrillReconcileCaptureApplied(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{probeCaptures: true})
	path := d.intentFor("ord-r1")
	d.fault(`{"delay_ms":2500}`) // longer than the upstream's 2s timeout
	want(t, d.keyed(path, "cap-r1", `{}`), 504, "outcome_unknown")
	d.fault(`{"delay_ms":0}`)
	op := d.settled("cap-r1")
	wantState(t, op, ledger.Succeeded)
	r := d.keyed(path, "cap-r1", `{}`)
	if r.status != 200 || r.header.Get("Idempotency-Reconciled") != "true" || r.header.Get("Idempotent-Replayed") != "true" ||
		!strings.Contains(r.body, `"status":"captured"`) {
		t.Fatalf("the retry after the proof: %+v", r)
	}
	d.wantEffects("captures", 1)
	if h := d.history(op); h[len(h)-1] != "unknown>succeeded" { // no operator acted: the probe's proof did
		t.Fatalf("history %v", h)
	}
}

// TestDrillReconcileCaptureNotApplied: a capture the provider refused
// before committing, with a 500 that leaves it unknown, is probed and
// found not captured: released, and the agent's next retry captures once.
func TestDrillReconcileCaptureNotApplied(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{probeCaptures: true})
	path := d.intentFor("ord-r2")
	d.fault(`{"fail_before_commit":1}`)
	if r := d.keyed(path, "cap-r2", `{}`); r.status != 500 {
		t.Fatalf("the refused capture: %+v", r)
	}
	wantState(t, d.operation("cap-r2"), ledger.Unknown)
	wantState(t, d.settled("cap-r2"), ledger.Prepared)
	d.wantEffects("captures", 0)
	if r := d.keyed(path, "cap-r2", `{}`); r.status != 201 {
		t.Fatalf("the retry after the proof of non-delivery: %+v", r)
	}
	d.wantEffects("captures", 1)
}

// TestDrillReconcileTwoInstances: two gateways on one PostgreSQL, both
// reconciling, settle an unknown capture once: one resolution in its
// history, one capture at the provider, the same replay from either.
func TestDrillReconcileTwoInstances(t *testing.T) {
	t.Parallel()
	dsn, _ := testenv.PostgresSchema(t)
	d := newDrill(t, setup{storeDSN: dsn, probeCaptures: true})
	second := d.startGateway(0)
	path := d.intentFor("ord-r3")
	d.fault(`{"delay_ms":2500}`)
	want(t, d.keyed(path, "cap-r3", `{}`), 504, "outcome_unknown")
	d.fault(`{"delay_ms":0}`)
	waitFor(t, "the verdict", func() bool {
		r := do("GET", second.URL+"/_idem/v1/operations?key=cap-r3", "", "Authorization", "Bearer "+operatorToken)
		return r.status == 200 && strings.Contains(r.body, `"state":"succeeded"`)
	})
	r := do("GET", d.gw.URL+"/_idem/v1/operations?key=cap-r3", "", "Authorization", "Bearer "+operatorToken)
	var view struct {
		ID      string
		History []struct{ From, To string }
	}
	if err := json.Unmarshal([]byte(r.body), &view); err != nil {
		t.Fatal(err)
	}
	resolved := 0
	for _, h := range view.History {
		if h.From == "unknown" {
			resolved++
		}
	}
	if resolved != 1 {
		t.Fatalf("%d resolutions: %s", resolved, r.body)
	}
	for _, gw := range []string{d.gw.URL, second.URL} {
		r := do("POST", gw+path, `{}`, "Authorization", "Bearer "+token, "Idempotency-Key", "cap-r3")
		if r.status != 200 || r.header.Get("Idempotency-Reconciled") != "true" {
			t.Fatalf("a retry through %s: %+v", gw, r)
		}
	}
	d.wantEffects("captures", 1)
}
