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
		// The metrics name the action as the operation's route.
		if m := e.do("GET", "/metrics", "scraper-token", ""); !strings.Contains(m.body,
			`idemgate_operations_created_total{route="action:support.reply.send",tenant="acme"} 1`) {
			t.Fatalf("metrics: %s", m.body)
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
// after the lease lapsed into unknown, is 409 lease_lost, naming the
// operation, and changes nothing; release makes the next reservation execute with a higher
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
				if r := e.step(id, s, "agent-token", body); r.status != 409 || code(r) != "lease_lost" ||
					!strings.Contains(r.body, `"operation_id":"`+id+`"`) {
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
		if second.Operation.ID != id || second.Lease.Fence != 2 || second.Lease.Token == g.Lease.Token ||
			second.Operation.State != ledger.Executing || second.Operation.Attempts != 2 || len(second.Operation.History) != 3 {
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
		// A duplicate waiting (Prefer: wait) on an owner that dies hears
		// unknown once the lease lapses, not in_progress at the end of its wait.
		decodeGrant(t, e.reserve("mail.short", "dies", `{}`))
		if r := e.reserve("mail.short", "dies", `{}`, "Prefer", "wait=20"); r.status != 409 || code(r) != "outcome_unknown" {
			t.Fatalf("a waiter on a dead owner: %d %s", r.status, r.body)
		}
	})
}

// TestActionBadInputChangesNothing: each refusal has its documented
// status and code, and leaves no operation behind nor any changed.
func TestActionBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		e := newActionsEnv(t, db)
		refusals := []struct {
			name   string
			r      reply
			status int
			code   string
		}{
			{"unknown action", e.reserve("no.such", "k", `{}`), 404, "not_found"},
			{"no key", e.do("POST", "/_idem/v1/actions/support.reply.send", "agent-token", `{}`), 400, "missing_key"},
			{"not JSON", e.reserve("support.reply.send", "k", `{"ticket":`), 422, "invalid_command"},
			{"form, not JSON", e.reserve("support.reply.send", "k", `ticket=584`, "Content-Type", "application/x-www-form-urlencoded"), 422, "invalid_command"},
			{"fails the schema", e.reserve("report.render", "k", `{"order":7}`), 422, "invalid_command"},
			{"unknown member", e.reserve("report.render", "k", `{"order":"7","extra":1}`), 422, "invalid_command"},
			{"no token", e.do("POST", "/_idem/v1/actions/support.reply.send", "", `{}`, "Idempotency-Key", "k"), 401, "unauthorized"},
			{"without the role", e.reserve("admin.only", "k", `{}`), 403, "forbidden"},
			{"no concurrency value", e.reserve("deploy.run", "k", `{}`), 422, "invalid_command"},
			{"GET", e.do("GET", "/_idem/v1/actions/support.reply.send", "agent-token", ""), 404, "not_found"},
		}
		for _, c := range refusals {
			if c.r.status != c.status || code(c.r) != c.code {
				t.Errorf("%s: %d %s", c.name, c.r.status, c.r.body)
			}
		}
		if ops := e.operations(); len(ops) != 0 {
			t.Fatalf("refused reservations left %d operations", len(ops))
		}
		// The schema's defaults are part of the command: an explicit "pdf"
		// is the same request.
		if r := e.reserve("report.render", "pdf:7", `{"order":"7"}`); r.status != 201 {
			t.Fatalf("a valid command: %d %s", r.status, r.body)
		}
		if r := e.reserve("report.render", "pdf:7", `{"order":"7","format":"pdf"}`); r.status != 409 || code(r) != "in_progress" {
			t.Fatalf("the same command with its default written out: %d %s", r.status, r.body)
		}

		g := decodeGrant(t, e.reserve("support.reply.send", "steps", `{}`))
		id := g.Operation.ID
		steps := []struct {
			name, step, token, body string
			status                  int
			code                    string
		}{
			{"result over max_result", "complete", "agent-token", owner(g.Lease, `"state":"succeeded","result":"`+strings.Repeat("x", 80)+`"`), 413, "payload_too_large"},
			{"body far over max_result", "complete", "agent-token", owner(g.Lease, `"state":"succeeded","result":"`+strings.Repeat("x", 70<<10)+`"`), 413, "payload_too_large"},
			{"result not JSON", "complete", "agent-token", owner(g.Lease, `"state":"succeeded","result":{x}`), 422, "invalid_command"},
			{"no state", "complete", "agent-token", owner(g.Lease, ""), 422, "invalid_command"},
			{"state unknown", "complete", "agent-token", owner(g.Lease, `"state":"unknown"`), 422, "invalid_command"},
			{"no token", "complete", "agent-token", fmt.Sprintf(`{"fence":%d,"state":"succeeded"}`, g.Lease.Fence), 422, "invalid_command"},
			{"no fence", "heartbeat", "agent-token", fmt.Sprintf(`{"token":%q}`, g.Lease.Token), 422, "invalid_command"},
			{"a result on release", "release", "agent-token", owner(g.Lease, `"result":1`), 422, "invalid_command"},
			{"unknown member", "heartbeat", "agent-token", owner(g.Lease, `"lease":"1h"`), 422, "invalid_command"},
			{"another tenant", "complete", "globex-token", owner(g.Lease, `"state":"succeeded"`), 404, "not_found"},
			{"no such operation", "complete", "agent-token", owner(g.Lease, `"state":"succeeded"`), 404, "not_found"},
			{"no such step", "finish", "agent-token", owner(g.Lease, ""), 404, "not_found"},
		}
		for _, c := range steps {
			target := id
			if c.name == "no such operation" {
				target = "01J00000000000000000000000"
			}
			if r := e.step(target, c.step, c.token, c.body); r.status != c.status || code(r) != c.code {
				t.Errorf("%s: %d %s", c.name, r.status, r.body)
			}
		}
		op, _ := e.store.Get(context.Background(), id)
		if op.State != ledger.Executing || op.Response != nil || op.Fence != 1 {
			t.Fatalf("refused steps changed the operation: %+v", op)
		}
		// An operation that is not an action's takes no owner step.
		ticket := e.do("POST", "/v1/tickets", "agent-token", `{"title":"x"}`, "Idempotency-Key", "route-op")
		if r := e.step(ticket.header.Get("Idempotency-Operation"), "unknown", "agent-token", owner(g.Lease, "")); r.status != 404 {
			t.Fatalf("a route's operation: %d %s", r.status, r.body)
		}
		// release and unknown of an operation that is no longer executing.
		if r := e.step(id, "complete", "agent-token", owner(g.Lease, `"state":"failed","result":{"error":"bounced"}`)); r.status != 200 {
			t.Fatalf("complete failed: %d %s", r.status, r.body)
		}
		for _, s := range []string{"release", "unknown"} {
			if r := e.step(id, s, "agent-token", owner(g.Lease, "")); r.status != 409 || code(r) != "lease_lost" {
				t.Fatalf("%s of a failed operation: %d %s", s, r.status, r.body)
			}
		}
		replay := decodeGrant(t, e.reserve("support.reply.send", "steps", `{}`))
		if replay.Operation.State != ledger.Failed || string(replay.Result) != `{"error":"bounced"}` {
			t.Fatalf("replay of a failed action: %+v", replay)
		}
		// An operator's result is checked as an owner's.
		unk := decodeGrant(t, e.reserve("support.reply.send", "resolve-checks", `{}`))
		e.step(unk.Operation.ID, "unknown", "agent-token", owner(unk.Lease, ""))
		for _, body := range []string{
			`{"state":"succeeded","note":"n","result":"` + strings.Repeat("x", 80) + `"}`,
			`{"state":"prepared","note":"n","result":{}}`,
			`{"state":"succeeded","note":"n","result":{},"response":{"status":200}}`,
		} {
			if r := e.do("POST", "/_idem/v1/operations/"+unk.Operation.ID+"/resolve", "alice-token", body); r.status/100 != 4 {
				t.Errorf("resolve %s: %d %s", body, r.status, r.body)
			}
		}
		if r := e.do("POST", "/_idem/v1/operations/"+ticket.header.Get("Idempotency-Operation")+"/resolve", "alice-token",
			`{"state":"succeeded","note":"n","result":{}}`); r.status != 409 && r.status != 422 {
			t.Errorf("a result for a route's operation: %d %s", r.status, r.body)
		}
		if op, _ := e.store.Get(context.Background(), unk.Operation.ID); op.State != ledger.Unknown {
			t.Fatalf("refused resolutions changed the operation: %s", op.State)
		}
	})
}

// TestActionPolicies: approvals, business keys and concurrency groups
// apply to actions as to routes.
func TestActionPolicies(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		e := newActionsEnv(t, db)
		// Under the threshold: no approval.
		if r := e.reserve("refund.pay", "refund:small", `{"amount_minor":50}`); r.status != 201 {
			t.Fatalf("a small refund: %d %s", r.status, r.body)
		}
		wait := e.reserve("refund.pay", "refund:big", `{"amount_minor":5000}`)
		var acc contract.Accepted
		_ = json.Unmarshal([]byte(wait.body), &acc)
		if wait.status != 202 || acc.Code != "approval_required" || acc.Approval.Summary != "Refund 5000" {
			t.Fatalf("a big refund: %d %s", wait.status, wait.body)
		}
		a, err := e.store.GetApproval(context.Background(), acc.Approval.ID)
		if err != nil || a.Target != "ACTION refund.pay" {
			t.Fatalf("the approval: %+v %v", a, err)
		}
		if r := e.reserve("refund.pay", "refund:big", `{"amount_minor":5000}`); r.status != 202 {
			t.Fatalf("a retry while pending: %d %s", r.status, r.body)
		}
		dec := e.do("POST", "/_idem/v1/approvals/"+a.ID+"/approve", "alice-token",
			fmt.Sprintf(`{"fingerprint":%q,"note":"ok"}`, a.Fingerprint))
		if dec.status != 200 {
			t.Fatalf("approve: %d %s", dec.status, dec.body)
		}
		owned := e.reserve("refund.pay", "refund:big", `{"amount_minor":5000}`)
		if g := decodeGrant(t, owned); owned.status != 201 || g.Lease.Token == "" {
			t.Fatalf("after the approval: %d %s", owned.status, owned.body)
		}

		// Business key: a second key for the same source event replays the first.
		first := decodeGrant(t, e.reserve("alert.page", "page-1", `{"source_event_id":"ev-9"}`))
		e.step(first.Operation.ID, "complete", "agent-token", owner(first.Lease, `"state":"succeeded","result":{"page":"P-1"}`))
		dup := e.reserve("alert.page", "page-2", `{"source_event_id":"ev-9"}`)
		if dg := decodeGrant(t, dup); dup.status != 200 || dup.header.Get("Idempotency-Duplicate-Of") != first.Operation.ID ||
			string(dg.Result) != `{"page":"P-1"}` {
			t.Fatalf("a business duplicate: %d %v %s", dup.status, dup.header, dup.body)
		}

		// Concurrency group: one live operation per environment.
		prod := decodeGrant(t, e.reserve("deploy.run", "deploy-1", `{"environment":"prod"}`))
		locked := e.reserve("deploy.run", "deploy-2", `{"environment":"prod"}`)
		if locked.status != 409 || code(locked) != "concurrency_locked" {
			t.Fatalf("a second deploy to prod: %d %s", locked.status, locked.body)
		}
		e.step(prod.Operation.ID, "complete", "agent-token", owner(prod.Lease, `"state":"succeeded"`))
		if r := e.reserve("deploy.run", "deploy-2", `{"environment":"prod"}`); r.status != 201 {
			t.Fatalf("after the first ended: %d %s", r.status, r.body)
		}
	})
}

// TestActionReconciledFromProof: an action's unknown operation is probed
// at its upstream and settled applied; the retry replays the probe's
// answer as the result.
func TestActionReconciledFromProof(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		e := newActionsEnv(t, db)
		// The effect the owner performed: one the probe can see.
		e.do("POST", "/v1/tickets", "agent-token", `{"title":"x"}`, "Idempotency-Key", "the-effect")
		g := decodeGrant(t, e.reserve("file.write", "write-1", `{"path":"/v1/tickets"}`))
		e.step(g.Operation.ID, "unknown", "agent-token", owner(g.Lease, `"reason":"crashed mid-write"`))
		if n, err := e.g.Reconciler().Once(context.Background()); err != nil || n != 1 {
			t.Fatalf("reconcile: %d %v", n, err)
		}
		r := decodeGrant(t, e.reserve("file.write", "write-1", `{"path":"/v1/tickets"}`))
		if r.Operation.State != ledger.Succeeded || !strings.Contains(string(r.Result), `"count":1`) {
			t.Fatalf("after the proof: %+v %s", r.Operation.Summary, r.Result)
		}
	})
}

// TestActionWaitForTheOwner: a duplicate that asks to wait (Prefer: wait)
// is answered with the owner's result once it completes, not with
// in_progress: the owner step wakes it.
func TestActionWaitForTheOwner(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		e := newActionsEnv(t, db)
		g := decodeGrant(t, e.reserve("support.reply.send", "waited", `{}`))
		done := make(chan reply, 1)
		go func() {
			done <- e.reserve("support.reply.send", "waited", `{}`, "Prefer", "wait=20")
		}()
		time.Sleep(100 * time.Millisecond)
		if r := e.step(g.Operation.ID, "complete", "agent-token", owner(g.Lease, `"state":"succeeded","result":"sent"`)); r.status != 200 {
			t.Fatalf("complete: %d %s", r.status, r.body)
		}
		r := <-done
		if w := decodeGrant(t, r); r.status != 200 || string(w.Result) != `"sent"` || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the waiting duplicate: %d %s", r.status, r.body)
		}
	})
}

// TestActionAudit: an action's story is in the tenant's audit log (its
// reservation, its owner's completion, its replay), under its route and
// its principal, without its lease token or its result.
func TestActionAudit(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		section, _, _ := auditSection(t)
		e := newEnv(t, db.Open(t), db.DSN, "actions:\n  - {name: mail.send}\n"+section)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go e.g.RunBackground(ctx)
		g := decodeGrant(t, e.reserve("mail.send", "mail-1", `{"to":"a@example.com"}`))
		e.step(g.Operation.ID, "complete", "agent-token", owner(g.Lease, `"state":"succeeded","result":{"secret":"hunter2"}`))
		if r := e.reserve("mail.send", "mail-1", `{"to":"a@example.com"}`); r.status != 200 {
			t.Fatalf("replay: %d %s", r.status, r.body)
		}
		var export reply
		waitUntil(t, "three events in the export", func() bool {
			export = e.do("GET", "/_idem/v1/audit/export", "alice-token", "")
			return strings.Count(export.body, `"kind"`) == 3
		})
		for _, kind := range []string{"forwarded", "succeeded", "replayed"} {
			if !strings.Contains(export.body, `"kind":"`+kind+`"`) {
				t.Errorf("no %s event: %s", kind, export.body)
			}
		}
		if !strings.Contains(export.body, `"route":"action:mail.send"`) || !strings.Contains(export.body, `"principal":"agent"`) ||
			strings.Contains(export.body, g.Lease.Token) || strings.Contains(export.body, "hunter2") ||
			strings.Contains(export.body, "a@example.com") {
			t.Fatalf("the export: %s", export.body)
		}
	})
}
