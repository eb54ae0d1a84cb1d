package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/scenarios"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// The approval drills: production deployments wait for a human, on real
// gateway processes over both stores, and every verdict is the count of
// deployments the ops API started.

// approvalPolicy is the deployments route's approval block, for a drill
// that asks for one (ttl set).
func approvalPolicy(ttl string) string {
	if ttl == "" {
		return ""
	}
	return fmt.Sprintf(`, lease: 2s, approval: {when: 'body.environment == "production"', ttl: %s, approvers: [approver],
      summary: 'Deploy {{.body.artifact}} to {{.body.environment}} ({{.body.service}})', reversible: false}`, ttl)
}

// onBothStores runs a drill on SQLite and on the shared PostgreSQL, each
// in its own schema.
func onBothStores(t *testing.T, s setup, drill func(t *testing.T, d *drill)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		drill(t, newDrill(t, s))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pg := s
		pg.storeDSN, _ = testenv.PostgresSchema(t)
		drill(t, newDrill(t, pg))
	})
}

// as calls the gateway's control API as one of the approvers.
func (d *drill) as(who, method, path, body string) reply {
	return do(method, d.gw.URL+"/_idem/v1"+path, body, "Authorization", "Bearer "+approvers[who])
}

// view reads the operation under key through the control API.
func (d *drill) view(key string) contract.View {
	d.t.Helper()
	r := d.control("GET", "/operations?key="+key, "")
	var v contract.View
	if r.status != 200 || json.Unmarshal([]byte(r.body), &v) != nil {
		d.t.Fatalf("operation %s: %+v", key, r)
	}
	return v
}

// waiting decodes a 202 and checks it waits for an approval.
func waiting(t *testing.T, r reply, code string) contract.Accepted {
	t.Helper()
	var acc contract.Accepted
	if r.status != 202 || json.Unmarshal([]byte(r.body), &acc) != nil || acc.Code != code || acc.Approval.ID == "" ||
		r.header.Get("Location") != acc.StatusURL {
		t.Fatalf("want 202 %s, got %+v", code, r)
	}
	return acc
}

// decide approves or denies as who, echoing fp ("" reads the approval's).
func (d *drill) decide(who, verb, id, fp string) reply {
	d.t.Helper()
	if fp == "" {
		var v contract.ApprovalView
		if r := d.as("alice", "GET", "/approvals/"+id, ""); json.Unmarshal([]byte(r.body), &v) != nil {
			d.t.Fatalf("approval %s: %+v", id, r)
		}
		fp = v.Fingerprint
	}
	return d.as(who, "POST", "/approvals/"+id+"/"+verb, fmt.Sprintf(`{"fingerprint":%q,"note":"drill"}`, fp))
}

var prodDeploy = deployment("production", digest)

const otherDigest = "sha256:5b6e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33c"

// Bad decisions on a real gateway: an unknown approval, a missing or
// malformed fingerprint, a decision on an operation no longer waiting;
// each refused, nothing deployed, the operation unchanged.
func TestDrillApprovalBadDecisions(t *testing.T) {
	t.Parallel()
	onBothStores(t, setup{approvalTTL: "15m"}, func(t *testing.T, d *drill) {
		acc := waiting(t, d.keyed("/v1/deployments", "bad", prodDeploy), "approval_required")
		post := func(path, body string) reply { return d.as("alice", "POST", "/approvals/"+path, body) }
		for _, c := range []struct {
			name, path, body string
			status           int
			code             string
		}{
			{"unknown approval", "apr_01NOSUCHAPPROVAL/approve", `{"fingerprint":"sha256:` + strings.Repeat("a", 64) + `"}`, 404, "not_found"},
			{"no fingerprint", acc.Approval.ID + "/approve", `{"note":"fine"}`, 422, "invalid_command"},
			{"malformed fingerprint", acc.Approval.ID + "/deny", `{"fingerprint":"sha256:ABC"}`, 422, "invalid_command"},
			{"another request", acc.Approval.ID + "/approve", `{"fingerprint":"sha256:` + strings.Repeat("b", 64) + `"}`, 409, "approval_mismatch"},
		} {
			if r := post(c.path, c.body); r.status != c.status || problemCode(r) != c.code {
				t.Fatalf("%s: %+v", c.name, r)
			}
		}
		if v := d.view("bad"); v.State != ledger.Prepared || v.Approval.Status != ledger.ApprovalPending {
			t.Fatalf("refused decisions changed it: %+v", v.Approval)
		}
		if r := d.decide("alice", "deny", acc.Approval.ID, ""); r.status != 200 {
			t.Fatal(r)
		}
		if r := d.decide("bob", "approve", acc.Approval.ID, ""); r.status != 409 || problemCode(r) != "approval_closed" {
			t.Fatalf("a decision on an operation no longer waiting: %+v", r)
		}
		if r := d.keyed("/v1/deployments", "bad-2", prodDeploy); r.status != 202 {
			t.Fatal(r)
		}
		want(t, d.send("POST", "/v1/deployments", prodDeploy), 400, "missing_key")
		d.wantEffects("deployments_started", 0)
	})
}

// The demo's production deploy, on both stores: it waits for alice's
// approval, nothing deployed meanwhile; the agent's retry deploys it once;
// another artifact under the key is refused, and under a new key asks
// again (denied). Then the view: the approval is used, bound to the
// operation, its fingerprint and its command, decided by alice; the query
// is part of what the key is bound to; a retry now replays.
func TestDrillApprovalProductionDeploy(t *testing.T) {
	t.Parallel()
	onBothStores(t, setup{approvalTTL: "15m"}, func(t *testing.T, d *drill) {
		s, _ := d.play(scenarios.ActApprovedDeploy)
		key, prod := s.Key("deploy-prod"), deployment("production", scenarios.DigestProd)
		v := d.view(key)
		a := v.Approval
		if v.State != ledger.Succeeded || a == nil || a.OperationID != v.ID || a.Key != key ||
			a.Fingerprint != v.Fingerprint || a.Status != ledger.ApprovalUsed || a.DecidedBy != "alice" ||
			a.RequestedBy != "agent" || a.Target != "POST /v1/deployments" || a.Reversible == nil || *a.Reversible ||
			!strings.Contains(string(a.Command), scenarios.DigestProd) ||
			a.Summary != "Deploy "+scenarios.DigestProd+" to production (billing)" {
			t.Fatalf("operation view %+v, approval %+v", v, a)
		}
		if r := d.keyed("/v1/deployments", key, prod); r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: %+v", r)
		}
		want(t, d.keyed("/v1/deployments?dry_run=true", key, prod), 422, "fingerprint_mismatch")
		d.wantEffects("deployments_started", 1)
	})
}

// The requester cannot approve its own operation, even with the approver
// role; a principal without the role cannot decide; another tenant's
// approver is told there is no such approval.
func TestDrillApprovalWhoDecides(t *testing.T) {
	t.Parallel()
	onBothStores(t, setup{approvalTTL: "15m"}, func(t *testing.T, d *drill) {
		r := do("POST", d.gw.URL+"/v1/deployments", prodDeploy, "Authorization", "Bearer "+approvers["carol"],
			"Idempotency-Key", "dep-carol")
		acc := waiting(t, r, "approval_required")
		fp := d.view("dep-carol").Fingerprint
		if r := d.decide("carol", "approve", acc.Approval.ID, fp); r.status != 403 || problemCode(r) != "forbidden" {
			t.Fatalf("the requester approves: %+v", r)
		}
		agent := do("POST", d.gw.URL+"/_idem/v1/approvals/"+acc.Approval.ID+"/approve",
			fmt.Sprintf(`{"fingerprint":%q}`, fp), "Authorization", "Bearer "+token)
		if agent.status != 403 || problemCode(agent) != "forbidden" {
			t.Fatalf("an agent approves: %+v", agent)
		}
		if r := d.decide("eve", "approve", acc.Approval.ID, fp); r.status != 404 {
			t.Fatalf("another tenant's approver: %+v", r)
		}
		if r := d.as("eve", "GET", "/approvals/"+acc.Approval.ID, ""); r.status != 404 {
			t.Fatalf("another tenant reads it: %+v", r)
		}
		if v := d.view("dep-carol"); v.State != ledger.Prepared || v.Approval.Status != ledger.ApprovalPending {
			t.Fatalf("refused decisions changed it: %+v", v)
		}
		d.wantEffects("deployments_started", 0)
	})
}

// An approval that expires before it is used is never used: a decision
// after expiry is refused, the next retry opens a new approval for the
// same operation (202 approval_expired), and that one, approved, deploys
// once. The expired approval freed the environment meanwhile.
func TestDrillApprovalExpiry(t *testing.T) {
	t.Parallel()
	// A TTL of 5s: the second request, sent at once, meets the approval
	// pending on a loaded machine too; then the drill waits for the sweep.
	onBothStores(t, setup{approvalTTL: "5s"}, func(t *testing.T, d *drill) {
		acc := waiting(t, d.keyed("/v1/deployments", "dep-x", prodDeploy), "approval_required")
		want(t, d.keyed("/v1/deployments", "dep-y", deployment("production", otherDigest)), 409, "concurrency_locked")
		waitFor(t, "the approval expired and swept", func() bool {
			return d.view("dep-x").Approval.Status == ledger.ApprovalExpired
		})
		if r := d.decide("alice", "approve", acc.Approval.ID, ""); r.status != 409 || problemCode(r) != "approval_closed" {
			t.Fatalf("decision after expiry: %+v", r)
		}
		if v := d.view("dep-x"); v.Approval.Status != ledger.ApprovalExpired {
			t.Fatalf("swept: %+v", v.Approval)
		}
		other := waiting(t, d.keyed("/v1/deployments", "dep-y", deployment("production", otherDigest)), "approval_required")
		if r := d.decide("alice", "deny", other.Approval.ID, ""); r.status != 200 {
			t.Fatalf("deny: %+v", r)
		}
		again := waiting(t, d.keyed("/v1/deployments", "dep-x", prodDeploy), "approval_expired")
		if again.OperationID != acc.OperationID || again.Approval.ID == acc.Approval.ID {
			t.Fatalf("after expiry: %+v", again)
		}
		if r := d.decide("alice", "approve", again.Approval.ID, ""); r.status != 200 {
			t.Fatalf("approve: %+v", r)
		}
		if r := d.keyed("/v1/deployments", "dep-x", prodDeploy); r.status != 201 {
			t.Fatalf("run: %+v", r)
		}
		d.wantEffects("deployments_started", 1)
		want(t, d.keyed("/v1/deployments", "dep-y", deployment("production", otherDigest)), 403, "approval_denied")
	})
}

// A concurrent approve and deny: exactly one wins. Then 50 identical
// retries at once after an approval: one deployment, the approval used
// once.
func TestDrillApprovalRaces(t *testing.T) {
	t.Parallel()
	onBothStores(t, setup{approvalTTL: "15m"}, func(t *testing.T, d *drill) {
		acc := waiting(t, d.keyed("/v1/deployments", "race", prodDeploy), "approval_required")
		fp := d.view("race").Fingerprint
		var r [2]reply
		concurrently(2, func(i int) {
			r[i] = d.decide([]string{"alice", "bob"}[i], []string{"approve", "deny"}[i], acc.Approval.ID, fp)
		})
		statuses := []int{r[0].status, r[1].status}
		slices.Sort(statuses)
		if !slices.Equal(statuses, []int{200, 409}) || problemCode(r[0])+problemCode(r[1]) != "approval_closed" {
			t.Fatalf("approve and deny at once: %+v", r)
		}
		approved := r[0].status == 200
		var answers [50]reply
		concurrently(50, func(i int) { answers[i] = d.keyed("/v1/deployments", "race", prodDeploy) })
		n201, n403 := 0, 0
		for _, a := range answers {
			switch {
			case a.status == 201:
				n201++
			case a.status == 403 && problemCode(a) == "approval_denied":
				n403++
			case a.status != 409:
				t.Fatalf("a retry got %+v", a)
			}
		}
		v := d.view("race")
		if approved {
			if n201 == 0 || v.State != ledger.Succeeded || v.Attempts != 1 || v.Approval.Status != ledger.ApprovalUsed {
				t.Fatalf("approved: %d created, %+v", n201, v)
			}
			d.wantEffects("deployments_started", 1)
			return
		}
		if n403 != 50 || v.State != ledger.Failed {
			t.Fatalf("denied: %d refusals, %+v", n403, v)
		}
		d.wantEffects("deployments_started", 0)
	})
}

// kill -9 of the gateway between the approval and the retry, and during
// the approved execution: no second deployment, and the operation ends
// succeeded or unknown, never approved again silently.
func TestDrillApprovalCrash(t *testing.T) {
	t.Parallel()
	onBothStores(t, setup{approvalTTL: "15m", upstreamTimeout: "1m"}, func(t *testing.T, d *drill) {
		acc := waiting(t, d.keyed("/v1/deployments", "crash-1", prodDeploy), "approval_required")
		if r := d.decide("alice", "approve", acc.Approval.ID, ""); r.status != 200 {
			t.Fatal(r)
		}
		d.gw.Kill()
		d.gw = d.startGateway(0)
		first := d.keyed("/v1/deployments", "crash-1", prodDeploy)
		if first.status != 201 {
			t.Fatalf("retry after the restart: %+v", first)
		}
		d.wantEffects("deployments_started", 1)

		// Now killed while the approved deployment is at the API, once the
		// API's controller has finished the first one.
		d.waitDeployed(first)
		waiting(t, d.keyed("/v1/deployments", "crash-2", deployment("production", otherDigest)), "approval_required")
		v := d.view("crash-2")
		if r := d.decide("alice", "approve", v.Approval.ID, ""); r.status != 200 {
			t.Fatal(r)
		}
		d.hold(1)
		approved := make(chan reply, 1)
		go func() { approved <- d.keyed("/v1/deployments", "crash-2", deployment("production", otherDigest)) }()
		d.killWhileInFlight(d.gw, func() bool { return len(approved) > 0 })
		d.release()
		d.gw = d.startGateway(0)
		waitFor(t, "the lease to lapse", func() bool {
			r := d.keyed("/v1/deployments", "crash-2", deployment("production", otherDigest))
			return r.status == 409 && problemCode(r) == "outcome_unknown"
		})
		v = d.view("crash-2")
		if v.State != ledger.Unknown || v.Approval.Status != ledger.ApprovalUsed || v.Attempts != 1 {
			t.Fatalf("after the crash: %+v %+v", v, v.Approval)
		}
		waitFor(t, "the API to finish the write it was given", func() bool { return d.inFlight() == 0 })
		if n := d.effects()["deployments_started"]; n < 1 || n > 2 {
			t.Fatalf("%d deployments, want the first and at most one more", n)
		}
		page := d.as("alice", "GET", "/approvals?status=pending", "")
		if !strings.Contains(page.body, `"approvals":[]`) {
			t.Fatalf("a crash opened an approval: %s", page.body)
		}
	})
}
