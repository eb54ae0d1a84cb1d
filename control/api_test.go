package control_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control/client"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// pending makes an operation of acme, requested by agent, that waits for
// an approver.
func (fx *fixture) pending(key string) *ledger.Operation {
	fx.t.Helper()
	res, err := fx.store.Reserve(context.Background(), ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "acme", Key: key,
		Route: "POST /v1/deployments", Fingerprint: "sha256:" + strings.Repeat("b", 64), Retention: time.Hour,
		Actor: "test", Principal: "agent", Approval: &ledger.ApprovalRequest{Target: "POST /v1/deployments",
			Summary: "Deploy api to production", Command: []byte(`{"environment":"production"}`), RequestedBy: "agent",
			Approvers: []string{"approver"}, TTL: time.Hour, ValidFor: time.Hour}})
	if err != nil {
		fx.t.Fatal(err)
	}
	return res.Op
}

// TestDecisions: an approver of the tenant decides, echoing the
// fingerprint; another tenant's approval is not found; the requester,
// a principal without the role, another fingerprint and a long note are
// refused, and change nothing; a decision wakes the waiting requests.
func TestDecisions(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		fx := newFixture(t, db.Open(t), "")
		op := fx.pending("dep-1")
		ctx := context.Background()
		a, err := fx.as("bob").Approval(ctx, op.Approval.ID)
		if err != nil || a.Status != ledger.ApprovalPending || a.OperationID != op.ID {
			t.Fatalf("show: %+v %v", a, err)
		}
		list, err := fx.as("bob").Approvals(ctx, client.ApprovalQuery{Status: "pending"})
		if err != nil || len(list.Approvals) != 1 || list.Approvals[0].ID != a.ID {
			t.Fatalf("list: %+v %v", list, err)
		}
		if other, err := fx.as("mallory").Approvals(ctx, client.ApprovalQuery{}); err != nil || len(other.Approvals) != 0 {
			t.Fatalf("another tenant lists %+v %v", other, err)
		}
		good := contract.Decision{Fingerprint: a.Fingerprint, Note: "checked"}
		for who, d := range map[string]struct {
			d    contract.Decision
			want string
		}{
			"mallory":  {good, contract.CodeNotFound},
			"operator": {good, contract.CodeForbidden},
			"agent":    {good, contract.CodeForbidden},
			"bob":      {contract.Decision{Fingerprint: "sha256:" + strings.Repeat("0", 64)}, contract.CodeApprovalMismatch},
			"alice":    {contract.Decision{Fingerprint: a.Fingerprint, Note: strings.Repeat("n", 2001)}, contract.CodeInvalidCommand},
		} {
			if _, err := fx.as(who).Approve(ctx, a.ID, d.d); code(err) != d.want {
				t.Errorf("%s approves: %v, want %s", who, err, d.want)
			}
		}
		if _, err := fx.as("mallory").Approval(ctx, a.ID); !client.IsNotFound(err) {
			t.Errorf("another tenant reads the approval: %v", err)
		}
		if now, _ := fx.store.GetApproval(ctx, a.ID); now.Status != ledger.ApprovalPending || len(fx.woken) != 0 {
			t.Fatalf("refusals changed something: %s, woke %v", now.Status, fx.woken)
		}
		d, err := fx.as("bob").Deny(ctx, a.ID, good)
		if err != nil || d.Status != ledger.ApprovalDenied || d.DecidedBy != "bob" || len(fx.woken) != 1 || fx.woken[0] != op.ID {
			t.Fatalf("deny: %+v %v, woke %v", d, err, fx.woken)
		}
		if _, err := fx.as("alice").Approve(ctx, a.ID, good); code(err) != contract.CodeApprovalClosed {
			t.Fatalf("approve after a denial: %v", err)
		}
	})
}

// TestOperationsAndEffects: the tenant's operations by id, by key and by
// page, each whole with its effects; an admin settles an effect that
// waits, and nobody else does, nor another tenant's.
func TestOperationsAndEffects(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		fx := newFixture(t, db.Open(t), "")
		op := fx.unknown("acme", "dossier_42:v5")
		fx.unknown("globex", "theirs")
		ctx := context.Background()
		effects, err := fx.store.Enqueue(ctx, []ledger.EffectParams{{Tenant: "acme", OperationKey: "dossier_42:v5",
			Name: "send-link", Target: "crm", Path: "/v1/notes", Body: []byte(`{"secret":"patient"}`)}})
		if err != nil {
			t.Fatal(err)
		}
		v, raw, err := fx.as("agent").OperationByKey(ctx, "dossier_42:v5")
		if err != nil || v.ID != op.ID || len(v.Effects) != 1 || v.Effects[0].Name != "send-link" ||
			strings.Contains(string(raw), "patient") {
			t.Fatalf("by key: %+v %v %s", v, err, raw)
		}
		if _, err := fx.as("agent").Operation(ctx, op.ID); err != nil {
			t.Fatal(err)
		}
		if _, _, err := fx.as("mallory").OperationByKey(ctx, "dossier_42:v5"); !client.IsNotFound(err) {
			t.Fatalf("another tenant by key: %v", err)
		}
		page, err := fx.as("agent").Operations(ctx, client.ListQuery{State: "unknown", Limit: 10})
		if err != nil || len(page.Operations) != 1 || page.Operations[0].ID != op.ID || page.Next != nil {
			t.Fatalf("page: %+v %v", page, err)
		}
		if _, err := fx.as("agent").Operations(ctx, client.ListQuery{State: "lost"}); code(err) != contract.CodeInvalidCommand {
			t.Fatalf("a state that is none: %v", err)
		}
		id := effects[0].ID
		settle := contract.EffectResolveRequest{State: "succeeded", Note: "the note is in the CRM", ResultRef: "N-1"}
		for who, want := range map[string]string{"agent": contract.CodeForbidden, "mallory": contract.CodeNotFound} {
			if _, err := fx.as(who).ResolveEffect(ctx, id, settle); code(err) != want {
				t.Errorf("%s settles the effect: %v, want %s", who, err, want)
			}
		}
		e, err := fx.as("alice").ResolveEffect(ctx, id, settle)
		if err != nil || e.State != ledger.Succeeded || e.ResolvedBy != "alice" || e.ResultRef != "N-1" {
			t.Fatalf("settle: %+v %v", e, err)
		}
		if _, err := fx.as("alice").ResolveEffect(ctx, id, settle); code(err) != contract.CodeIllegalTransition {
			t.Fatalf("settle a final effect: %v", err)
		}
	})
}

// TestAPIRefusals: a request without a principal is 401, a path that is
// no resource 404, an answer that is no problem a StatusError, a gateway
// that is not there an error, and the checkpoint not found before the
// first.
func TestAPIRefusals(t *testing.T) {
	fx := newFixture(t, dbtest.SQLite(t), "")
	ctx := context.Background()
	if _, err := fx.as("nobody").Approvals(ctx, client.ApprovalQuery{}); code(err) != contract.CodeUnauthorized {
		t.Fatalf("no principal: %v", err)
	}
	resp, err := http.Get(fx.srv.URL + contract.ControlPrefix + "/nothing")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 || resp.Header.Get("Content-Type") != contract.MediaProblem {
		t.Fatalf("no such resource: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if _, err := fx.as("alice").Checkpoint(ctx); !client.IsNotFound(err) {
		t.Fatalf("checkpoint before the first: %v", err)
	}
	var out strings.Builder
	if n, err := fx.as("alice").Export(ctx, &out); err != nil || n != 0 {
		t.Fatalf("an empty export: %d %v %q", n, err, out.String())
	}
	plain := http.NewServeMux()
	plain.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "bad gateway", http.StatusBadGateway) })
	proxy := httptestServer(t, plain)
	c, _ := client.New(proxy, "t")
	var se *client.StatusError
	if _, err := c.Operation(ctx, "op_1"); !errorsAs(err, &se) || se.Status != 502 || se.Text != "bad gateway" {
		t.Fatalf("a proxy's page: %v", err)
	}
	for _, bad := range []string{"", "ftp://x", "http://"} {
		if _, err := client.New(bad, "t"); err == nil {
			t.Errorf("client for %q", bad)
		}
	}
	if _, err := client.New(fx.srv.URL, ""); err == nil {
		t.Error("a client without a token")
	}
}
