package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/scenarios"
	"github.com/idemgate/idemgate/ledger"
)

// The domain drills: tickets, deployments, payments.

// A duplicate alert (same source_event_id, another key, a paraphrased
// title) yields one ticket, through the gateway in front of a naive API and
// from the API's own uniqueness rule.
func TestDrillDuplicateAlertOneTicket(t *testing.T) {
	t.Parallel()
	t.Run("gateway business key", func(t *testing.T) {
		t.Parallel()
		d := newDrill(t, setup{}) // the demo's act: the second gets the first one's answer
		d.play(scenarios.ActDuplicateAlert)
		d.wantEffects("tickets_created", 1)
	})
	t.Run("api uniqueness", func(t *testing.T) {
		t.Parallel()
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

func deployment(env, artifact string) string { return scenarios.Deployment(env, artifact) }

const digest = scenarios.DigestStaging

// Two concurrent deployments to one environment: one runs, the other gets
// 409, from the gateway's concurrency_key and from the API's own lock.
func TestDrillConcurrentDeployments(t *testing.T) {
	t.Parallel()
	t.Run("gateway concurrency key", func(t *testing.T) {
		t.Parallel()
		// The first holds the lock, its write held at the API, until the
		// second has its answer.
		d := newDrill(t, setup{upstreamTimeout: "1m"})
		d.hold(1)
		var r [2]reply
		concurrently(2, func(i int) {
			r[i] = d.keyed("/v1/deployments", fmt.Sprintf("dep-%d", i), deployment("production", digest))
			d.release()
		})
		statuses := []int{r[0].status, r[1].status}
		slices.Sort(statuses)
		if !slices.Equal(statuses, []int{201, 409}) || problemCode(r[0])+problemCode(r[1]) != "concurrency_locked" {
			t.Fatalf("two deployments: %+v", r)
		}
		d.wantEffects("deployments_started", 1)
	})
	t.Run("api lock", func(t *testing.T) {
		t.Parallel()
		// The first's rollout holds the lock for a minute: the second
		// arrives within it, however late.
		d := newDrill(t, setup{idempotentAPI: true, deployDuration: time.Minute})
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

// A mutable ref is refused, with a reason, and nothing is deployed: the
// demo's act (main refused, a digest deployed), then two more tags.
func TestDrillMutableRefRefused(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{})
	s, _ := d.play(scenarios.ActMutableRef)
	wantState(t, d.operation(s.Key("deploy-main")), ledger.Failed)
	for i, ref := range []string{"latest", "v1.2.3"} {
		r := d.keyed("/v1/deployments", fmt.Sprintf("ref-%d", i), deployment("staging", ref))
		if r.status != 422 || !strings.Contains(r.body, "immutable") {
			t.Fatalf("artifact %q: %+v", ref, r)
		}
		wantState(t, d.operation(fmt.Sprintf("ref-%d", i)), ledger.Failed)
	}
	d.wantEffects("deployments_started", 1)
}

// A payment capture that times out leaves its operation unknown, and
// nothing is charged twice, however often the agent retries, even past
// its lease; an operator reconciles it from the API's records with the
// CLI (the demo's act, with these checks in its middle).
func TestDrillCaptureTimeoutUnknown(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{})
	e, s := d.scenarioEnv(&bytes.Buffer{}), scenarios.NewState("cap")
	ctx := context.Background()
	c, err := scenarios.CaptureUnknown(ctx, e, s)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the late capture", func() bool { return d.effects()["captures"] == 1 })
	for range 3 {
		want(t, d.keyed(c.Path, c.Key, `{}`), 409, "outcome_unknown")
	}
	wantState(t, d.operation(c.Key), ledger.Unknown)
	time.Sleep(1200 * time.Millisecond) // past the lease: still nothing re-sent
	want(t, d.keyed(c.Path, c.Key, `{}`), 409, "outcome_unknown")
	d.wantEffects("captures", 1)
	if err := scenarios.ResolveCapture(ctx, e, s, c); err != nil {
		t.Fatal(err)
	}
	wantState(t, d.operation(c.Key), ledger.Succeeded)
	d.wantEffects("captures", 1)
}
