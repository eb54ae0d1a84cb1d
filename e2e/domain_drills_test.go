package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// The domain drills: tickets, deployments, payments.

// A duplicate alert (same source_event_id, another key, a paraphrased
// title) yields one ticket, through the gateway in front of a naive API and
// from the API's own uniqueness rule.
func TestDrillDuplicateAlertOneTicket(t *testing.T) {
	t.Run("gateway business key", func(t *testing.T) {
		d := newDrill(t, setup{})
		first := d.keyed("/v1/tickets", "alert-a", ticket("evt-42", "DB primary down"))
		dup := d.keyed("/v1/tickets", "alert-b", ticket("evt-42", "Database primary is down!"))
		if first.status != 201 || dup.body != first.body ||
			dup.header.Get("Idempotency-Duplicate-Of") != first.header.Get("Idempotency-Operation") {
			t.Fatalf("first %+v\nduplicate %+v", first, dup)
		}
		d.wantEffects("tickets_created", 1)
	})
	t.Run("api uniqueness", func(t *testing.T) {
		d := newDrill(t, setup{idempotentAPI: true})
		first := d.direct("/v1/tickets", "alert-a", ticket("evt-42", "DB primary down"))
		dup := d.direct("/v1/tickets", "alert-b", ticket("evt-42", "Database primary is down!"))
		var a, b struct {
			ID      int64
			Created bool
		}
		json.Unmarshal([]byte(first.body), &a)
		json.Unmarshal([]byte(dup.body), &b)
		if first.status != 201 || !a.Created || dup.status != 200 || b.Created || a.ID != b.ID {
			t.Fatalf("first %+v\nduplicate %+v", first, dup)
		}
		d.wantEffects("tickets_created", 1)
	})
}

func deployment(env, artifact string) string {
	return fmt.Sprintf(`{"service":"billing","environment":%q,"artifact":%q}`, env, artifact)
}

const digest = "sha256:4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b"

// Two concurrent deployments to one environment: one runs, the other gets
// 409, from the gateway's concurrency_key and from the API's own lock.
func TestDrillConcurrentDeployments(t *testing.T) {
	t.Run("gateway concurrency key", func(t *testing.T) {
		d := newDrill(t, setup{hold: time.Second}) // the first holds the lock while the second arrives
		var r [2]reply
		concurrently(2, func(i int) {
			r[i] = d.keyed("/v1/deployments", fmt.Sprintf("dep-%d", i), deployment("production", digest))
		})
		statuses := []int{r[0].status, r[1].status}
		slices.Sort(statuses)
		if !slices.Equal(statuses, []int{201, 409}) || problemCode(r[0])+problemCode(r[1]) != "concurrency_locked" {
			t.Fatalf("two deployments: %+v", r)
		}
		d.wantEffects("deployments_started", 1)
	})
	t.Run("api lock", func(t *testing.T) {
		d := newDrill(t, setup{idempotentAPI: true})
		var r [2]reply
		concurrently(2, func(i int) {
			r[i] = d.direct("/v1/deployments", fmt.Sprintf("dep-%d", i), deployment("production", digest))
		})
		statuses := []int{r[0].status, r[1].status}
		slices.Sort(statuses)
		locked := r[0]
		if r[1].status == 409 {
			locked = r[1]
		}
		// The refusal names the active deployment.
		if !slices.Equal(statuses, []int{201, 409}) || !strings.Contains(locked.body, "deployment 1 of billing is still") {
			t.Fatalf("two deployments: %+v", r)
		}
		d.wantEffects("deployments_started", 1)
	})
}

// A mutable ref is refused, with a reason, and nothing is deployed.
func TestDrillMutableRefRefused(t *testing.T) {
	d := newDrill(t, setup{})
	for i, ref := range []string{"main", "latest", "v1.2.3"} {
		r := d.keyed("/v1/deployments", fmt.Sprintf("ref-%d", i), deployment("staging", ref))
		if r.status != 422 || !strings.Contains(r.body, "immutable") {
			t.Fatalf("artifact %q: %+v", ref, r)
		}
		wantState(t, d.operation(fmt.Sprintf("ref-%d", i)), ledger.Failed)
	}
	d.wantEffects("deployments_started", 0)
}

// A payment capture that times out leaves its operation unknown, and
// nothing is charged twice, however often the agent retries; an operator
// reconciles it from the API's records.
func TestDrillCaptureTimeoutUnknown(t *testing.T) {
	d := newDrill(t, setup{})
	intent := d.keyed("/v1/payment-intents", "pi-1",
		`{"order_id":"ord-9","amount_minor":12900,"currency":"EUR","payee":"ACME SAS","invoice_ref":"INV-9"}`)
	var in struct{ ID int64 }
	if err := json.Unmarshal([]byte(intent.body), &in); err != nil || intent.status != 201 {
		t.Fatalf("intent: %+v", intent)
	}
	d.fault(`{"delay_ms":2500}`) // longer than the upstream's 2s timeout
	path := fmt.Sprintf("/v1/payment-intents/%d/capture", in.ID)
	want(t, d.keyed(path, "cap-1", `{}`), 504, "outcome_unknown")
	d.fault(`{"delay_ms":0}`)
	waitFor(t, "the late capture", func() bool { return d.effects()["captures"] == 1 })
	for range 3 {
		want(t, d.keyed(path, "cap-1", `{}`), 409, "outcome_unknown")
	}
	op := d.operation("cap-1")
	wantState(t, op, ledger.Unknown)
	time.Sleep(1200 * time.Millisecond) // past the lease: still nothing re-sent
	want(t, d.keyed(path, "cap-1", `{}`), 409, "outcome_unknown")
	d.wantEffects("captures", 1)

	if r := d.control("POST", "/operations/"+op.ID+"/resolve",
		`{"state":"succeeded","note":"capture found for ord-9"}`); r.status != 200 {
		t.Fatalf("resolve: %+v", r)
	}
	if r := d.keyed(path, "cap-1", `{}`); r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after resolution: %+v", r)
	}
	d.wantEffects("captures", 1)
}
