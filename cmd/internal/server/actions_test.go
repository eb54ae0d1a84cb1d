package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// actionsConfig declares the actions the tests reserve (appended to the
// routes of configTemplate).
const actionsConfig = `actions:
  - {name: support.reply.send, lease: 5s, max_result: 64}
  - {name: mail.short, lease: 150ms}
  - {name: report.render, schema: %s}
  - {name: admin.only, roles: [admin]}
  - {name: refund.pay, approval: {when: 'body.amount_minor > 100', ttl: 1m, approvers: [admin], summary: 'Refund {{.body.amount_minor}}'}}
  - {name: alert.page, business_key: /source_event_id}
  - {name: deploy.run, concurrency_key: /environment}
  - {name: file.write, upstream: ops, reconcile: {probe: 'GET /v1/effects?path={{.body.path}}',
      applied: 'status == 200 && body.count >= 1', not_applied: 'status == 200 && body.count == 0', every: 1ms}}
`

// newActionsEnv is a gateway with the actions above, on a store.
func newActionsEnv(t *testing.T, db dbtest.DB) *env {
	schema := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(schema, []byte(`{"type":"object","required":["order"],
		"properties":{"order":{"type":"string"},"format":{"type":"string","default":"pdf"}},"additionalProperties":false}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return newEnv(t, db.Open(t), db.DSN, fmt.Sprintf(actionsConfig, schema))
}

// grant is what a 201 reservation hands over.
type grant struct {
	Operation contract.View      `json:"operation"`
	Lease     contract.LeaseView `json:"lease"`
	Result    json.RawMessage    `json:"result"`
}

func decodeGrant(t *testing.T, r reply) grant {
	t.Helper()
	var g grant
	if err := json.Unmarshal([]byte(r.body), &g); err != nil {
		t.Fatalf("%d %s: %v", r.status, r.body, err)
	}
	return g
}

// reserve reserves action name under key, as the agent.
func (e *env) reserve(name, key, command string, headers ...string) reply {
	e.t.Helper()
	return e.do("POST", "/_idem/v1/actions/"+name, "agent-token", command, append([]string{"Idempotency-Key", key}, headers...)...)
}

// step makes an owner step on operation id with body.
func (e *env) step(id, step, token, body string) reply {
	e.t.Helper()
	return e.do("POST", "/_idem/v1/operations/"+id+"/"+step, token, body)
}

// owner is the step body of a lease.
func owner(l contract.LeaseView, extra string) string {
	s := fmt.Sprintf(`{"token":%q,"fence":%d`, l.Token, l.Fence)
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

// TestActionReserveCompleteReplay: the caller reserves, owns the effect
// under a lease, completes with its result; every retry gets that result
// as a replay, a retry while it runs is in progress, and a changed
// command under the key is refused. Each step is in the history.
func TestActionReserveCompleteReplay(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		e := newActionsEnv(t, db)
		first := e.reserve("support.reply.send", "reply:584:v3", `{"ticket":"584","version":3}`)
		g := decodeGrant(t, first)
		if first.status != 201 || g.Lease.Token == "" || g.Lease.Fence != 1 || g.Operation.State != ledger.Executing ||
			g.Operation.Route != "action:support.reply.send" || g.Operation.Target != "ACTION support.reply.send" ||
			first.header.Get("Idempotency-Operation") != g.Operation.ID || first.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("reserve: %d %v %s", first.status, first.header, first.body)
		}
		busy := e.reserve("support.reply.send", "reply:584:v3", `{"version":3,"ticket":"584"}`)
		if busy.status != 409 || code(busy) != "in_progress" || busy.header.Get("Retry-After") == "" ||
			strings.Contains(busy.body, g.Lease.Token) {
			t.Fatalf("retry while executing: %d %s", busy.status, busy.body)
		}
		hb := e.step(g.Operation.ID, "heartbeat", "agent-token", owner(g.Lease, ""))
		hg := decodeGrant(t, hb)
		if hb.status != 200 || hg.Lease.Token != "" || hg.Lease.Fence != 1 || !hg.Lease.Until.After(g.Lease.Until) {
			t.Fatalf("heartbeat: %d %s", hb.status, hb.body)
		}
		done := e.step(g.Operation.ID, "complete", "agent-token",
			owner(g.Lease, `"state":"succeeded","result":{"message_id": "m-1"},"result_ref":"m-1"`))
		if dg := decodeGrant(t, done); done.status != 200 || dg.Operation.State != ledger.Succeeded || dg.Operation.ResultRef != "m-1" {
			t.Fatalf("complete: %d %s", done.status, done.body)
		}
		// The owner repeats its step (its reply was lost): told it is done.
		again := e.step(g.Operation.ID, "complete", "agent-token",
			owner(g.Lease, `"state":"succeeded","result":{"message_id":"m-1"},"result_ref":"m-1"`))
		if again.status != 200 {
			t.Fatalf("a repeated complete: %d %s", again.status, again.body)
		}
		for i := 0; i < 2; i++ {
			replay := e.reserve("support.reply.send", "reply:584:v3", `{"ticket":"584","version":3}`)
			rg := decodeGrant(t, replay)
			if replay.status != 200 || replay.header.Get("Idempotent-Replayed") != "true" || string(rg.Result) != `{"message_id":"m-1"}` ||
				rg.Operation.State != ledger.Succeeded || rg.Lease.Token != "" || len(rg.Operation.History) != 2 {
				t.Fatalf("replay %d: %d %v %s", i, replay.status, replay.header, replay.body)
			}
		}
		changed := e.reserve("support.reply.send", "reply:584:v3", `{"ticket":"584","version":4}`)
		if changed.status != 422 || code(changed) != "fingerprint_mismatch" {
			t.Fatalf("changed command: %d %s", changed.status, changed.body)
		}
		// The same key in another tenant is another operation.
		other := e.do("POST", "/_idem/v1/actions/support.reply.send", "globex-token", `{"ticket":"584","version":3}`,
			"Idempotency-Key", "reply:584:v3")
		if other.status != 201 || decodeGrant(t, other).Operation.ID == g.Operation.ID {
			t.Fatalf("another tenant: %d %s", other.status, other.body)
		}
	})
}

// TestActionOwnerStepsAreFenced: a step with another token or fence, or
// after the lease lapsed into unknown, is 409 lease_lost and changes
// nothing; release makes the next reservation execute with a higher
// fence, and the first owner's lease stops working; unknown is never
// re-run, until an operator resolves it with a result that retries then
// replay.
func TestActionOwnerStepsAreFenced(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		e := newActionsEnv(t, db)
		g := decodeGrant(t, e.reserve("support.reply.send", "fenced", `{"n":1}`))
		id := g.Operation.ID
		forged, stale := g.Lease, g.Lease
		forged.Token, stale.Fence = "forged", 7
		for _, l := range []contract.LeaseView{forged, stale} {
			for _, s := range []string{"complete", "heartbeat", "release", "unknown"} {
				body := owner(l, "")
				if s == "complete" {
					body = owner(l, `"state":"succeeded"`)
				}
				if r := e.step(id, s, "agent-token", body); r.status != 409 || code(r) != "lease_lost" {
					t.Fatalf("%s with token %q fence %d: %d %s", s, l.Token, l.Fence, r.status, r.body)
				}
			}
		}
		if op, _ := e.store.Get(context.Background(), id); op.State != ledger.Executing || op.Fence != 1 {
			t.Fatalf("refused steps changed the operation: %s fence %d", op.State, op.Fence)
		}
		rel := e.step(id, "release", "agent-token", owner(g.Lease, `"reason":"smtp refused the connection"`))
		if rel.status != 200 || decodeGrant(t, rel).Operation.State != ledger.Prepared {
			t.Fatalf("release: %d %s", rel.status, rel.body)
		}
		second := decodeGrant(t, e.reserve("support.reply.send", "fenced", `{"n":1}`))
		if second.Operation.ID != id || second.Lease.Fence != 2 || second.Lease.Token == g.Lease.Token {
			t.Fatalf("after release: %+v", second)
		}
		if r := e.step(id, "complete", "agent-token", owner(g.Lease, `"state":"succeeded"`)); r.status != 409 || code(r) != "lease_lost" {
			t.Fatalf("the first owner after a release: %d %s", r.status, r.body)
		}
		unk := e.step(id, "unknown", "agent-token", owner(second.Lease, `"reason":"timed out after sending"`))
		if unk.status != 200 || decodeGrant(t, unk).Operation.State != ledger.Unknown {
			t.Fatalf("unknown: %d %s", unk.status, unk.body)
		}
		if r := e.reserve("support.reply.send", "fenced", `{"n":1}`); r.status != 409 || code(r) != "outcome_unknown" {
			t.Fatalf("reserve of an unknown one: %d %s", r.status, r.body)
		}
		if r := e.step(id, "release", "agent-token", owner(second.Lease, "")); r.status != 409 || code(r) != "lease_lost" {
			t.Fatalf("release of an unknown one: %d %s", r.status, r.body)
		}
		res := e.do("POST", "/_idem/v1/operations/"+id+"/resolve", "alice-token",
			`{"state":"succeeded","note":"found it in the SMTP log","result":{"message_id":"m-9"},"result_ref":"m-9"}`)
		if res.status != 200 {
			t.Fatalf("resolve with a result: %d %s", res.status, res.body)
		}
		replay := decodeGrant(t, e.reserve("support.reply.send", "fenced", `{"n":1}`))
		if string(replay.Result) != `{"message_id":"m-9"}` || replay.Operation.ResultRef != "m-9" {
			t.Fatalf("replay after the resolution: %+v", replay)
		}
	})
}

// TestActionLeaseLapses: an owner that neither completes nor heartbeats
// loses its operation to unknown (the sweep), and its late step is
// lease_lost; the key is never run again.
func TestActionLeaseLapses(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		e := newActionsEnv(t, db)
		g := decodeGrant(t, e.reserve("mail.short", "lapse", `{}`))
		ctx := context.Background()
		deadline := time.Now().Add(10 * time.Second)
		for {
			time.Sleep(200 * time.Millisecond)
			if _, err := e.store.ExpireLeases(ctx, 10); err != nil {
				t.Fatal(err)
			}
			if op, _ := e.store.Get(ctx, g.Operation.ID); op.State == ledger.Unknown {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the lease never lapsed")
			}
		}
		for _, s := range []string{"heartbeat", "complete"} {
			body := owner(g.Lease, "")
			if s == "complete" {
				body = owner(g.Lease, `"state":"succeeded"`)
			}
			if r := e.step(g.Operation.ID, s, "agent-token", body); r.status != 409 || code(r) != "lease_lost" {
				t.Fatalf("%s after the lapse: %d %s", s, r.status, r.body)
			}
		}
		if r := e.reserve("mail.short", "lapse", `{}`); r.status != 409 || code(r) != "outcome_unknown" {
			t.Fatalf("reserve after the lapse: %d %s", r.status, r.body)
		}
	})
}
