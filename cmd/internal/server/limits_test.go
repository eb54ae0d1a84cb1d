package server_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/idemgate/idemgate/ledger"
)

// TestRateLimit: past its burst a tenant gets 429 rate_limited with
// Retry-After, nothing is reserved or forwarded, and other tenants are not
// slowed by it.
func TestRateLimit(t *testing.T) {
	forEachStoreRoutes(t, "limits:\n  tenants: {acme: {rate: 1/m, burst: 2}}\n", func(t *testing.T, e *env) {
		for i := range 2 {
			if r := e.do("POST", "/v1/tickets", "agent-token", `{}`, "Idempotency-Key", fmt.Sprint("r", i)); r.status != 201 {
				t.Fatalf("request %d within the burst: %+v", i, r)
			}
		}
		r := e.do("POST", "/v1/tickets", "agent-token", `{}`, "Idempotency-Key", "r2")
		if retry, _ := strconv.Atoi(r.header.Get("Retry-After")); r.status != 429 || code(r) != "rate_limited" || retry < 1 {
			t.Fatalf("over the burst: %+v", r)
		}
		if r := e.do("GET", "/v1/tickets/T-1", "agent-token", ""); r.status != 429 {
			t.Fatalf("a read over the rate: %+v", r)
		}
		wantNoOperation(t, e, "acme", "r2")
		if r := e.do("POST", "/v1/tickets", "globex-token", `{}`, "Idempotency-Key", "g"); r.status != 201 {
			t.Fatalf("another tenant: %+v", r)
		}
		if n := e.up.count("/v1/tickets"); n != 3 {
			t.Fatalf("%d tickets, want 3", n)
		}
	})
}

// TestLiveBudget: a tenant with max_live operations not yet final gets 429
// for a new one; a retry of one it has is answered as always. Operations
// that finished do not count, even before the usage is read again.
func TestLiveBudget(t *testing.T) {
	forEachStoreRoutes(t, "limits:\n  default: {max_live: 2}\n", func(t *testing.T, e *env) {
		for i := range 5 {
			if r := e.do("POST", "/v1/tickets", "agent-token", `{}`, "Idempotency-Key", fmt.Sprint("done", i)); r.status != 201 {
				t.Fatalf("finished operations are not live, yet the one after %d of them got %+v", i, r)
			}
		}
		for i := range 2 {
			if r := e.do("POST", "/v1/lost", "agent-token", `{}`, "Idempotency-Key", fmt.Sprint("u", i)); r.status != 502 {
				t.Fatalf("lost %d: %+v", i, r)
			}
		}
		r := e.do("POST", "/v1/tickets", "agent-token", `{}`, "Idempotency-Key", "third")
		if r.status != 429 || code(r) != "rate_limited" || r.header.Get("Retry-After") == "" {
			t.Fatalf("a third live operation: %+v", r)
		}
		wantNoOperation(t, e, "acme", "third")
		if r := e.do("POST", "/v1/lost", "agent-token", `{}`, "Idempotency-Key", "u0"); r.status != 409 || code(r) != "outcome_unknown" {
			t.Fatalf("a retry of a live operation over the budget: %+v", r)
		}
		if r := e.do("POST", "/v1/tickets", "globex-token", `{}`, "Idempotency-Key", "g"); r.status != 201 {
			t.Fatalf("another tenant: %+v", r)
		}
	})
}

// TestStoredBudget: past max_stored bytes of stored answers, new keys are
// refused and replays still served.
func TestStoredBudget(t *testing.T) {
	forEachStoreRoutes(t, "limits:\n  default: {max_stored: 10B}\n", func(t *testing.T, e *env) {
		first := e.do("POST", "/v1/tickets", "agent-token", `{}`, "Idempotency-Key", "s0")
		if first.status != 201 {
			t.Fatalf("first: %+v", first)
		}
		if r := e.do("POST", "/v1/tickets", "agent-token", `{}`, "Idempotency-Key", "s1"); r.status != 429 {
			t.Fatalf("over the stored budget: %+v", r)
		}
		if r := e.do("POST", "/v1/tickets", "agent-token", `{}`, "Idempotency-Key", "s0"); r.status != 201 || r.body != first.body {
			t.Fatalf("a replay over the stored budget: %+v", r)
		}
		if n := e.up.count("/v1/tickets"); n != 1 {
			t.Fatalf("%d tickets", n)
		}
	})
}

func wantNoOperation(t *testing.T, e *env, tenant, key string) {
	t.Helper()
	if op, err := e.store.GetByKey(context.Background(), ledger.OpKey{Tenant: tenant, Namespace: ledger.NamespaceClients,
		Key: key}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("%s/%s was reserved: %+v, %v", tenant, key, op, err)
	}
}

// TestLiveBudgetCountsActionsOutWhenTheirOwnerEnds: an action's operation
// is live from its reservation until its owner completes it, on the
// owner's step, not at the next read of the usage; one its owner still
// holds counts.
func TestLiveBudgetCountsActionsOutWhenTheirOwnerEnds(t *testing.T) {
	forEachStoreRoutes(t, "limits:\n  default: {max_live: 2}\nactions:\n  - {name: mail.send}\n", func(t *testing.T, e *env) {
		for i := range 5 {
			g := decodeGrant(t, e.reserve("mail.send", fmt.Sprint("done", i), `{}`))
			if r := e.step(g.Operation.ID, "complete", "agent-token", owner(g.Lease, `"state":"succeeded"`)); r.status != 200 {
				t.Fatalf("complete %d: %d %s", i, r.status, r.body)
			}
			// The owner repeats its step: counted out once.
			e.step(g.Operation.ID, "complete", "agent-token", owner(g.Lease, `"state":"succeeded"`))
		}
		for i := range 2 {
			if r := e.reserve("mail.send", fmt.Sprint("held", i), `{}`); r.status != 201 {
				t.Fatalf("held %d: %d %s", i, r.status, r.body)
			}
		}
		if r := e.reserve("mail.send", "third", `{}`); r.status != 429 || code(r) != "rate_limited" {
			t.Fatalf("a third live action: %d %s", r.status, r.body)
		}
		wantNoOperation(t, e, "acme", "third")
	})
}
