package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// TestControlAPIEffects: an operation's view carries its effects, in
// their order, those of its own tenant and key only, and never their
// bodies or headers; one without effects has an empty list.
func TestControlAPIEffects(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		e.do("POST", "/v1/tickets", "agent-token", `{}`, "Idempotency-Key", "dossier_42:v5")
		e.do("POST", "/v1/tickets", "agent-token", `{}`, "Idempotency-Key", "plain")
		op, err := e.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
			Key: "dossier_42:v5"})
		if err != nil {
			t.Fatal(err)
		}
		effect := func(tenant, name string) ledger.EffectParams {
			return ledger.EffectParams{Tenant: tenant, OperationKey: "dossier_42:v5", Name: name, Target: "crm",
				Path: "/v1/notes", Header: map[string][]string{"Authorization": {"Bearer effect-secret"}},
				Body: []byte(`{"patient":"private"}`)}
		}
		if _, err := e.store.Enqueue(context.Background(), []ledger.EffectParams{effect("acme", "make-pdf"),
			effect("acme", "send-link"), effect("globex", "other-tenant")}); err != nil {
			t.Fatal(err)
		}
		r := e.do("GET", "/_idem/v1/operations/"+op.ID, "agent-token", "")
		var v contract.View
		if err := json.Unmarshal([]byte(r.body), &v); err != nil || r.status != 200 {
			t.Fatalf("get: %d %s", r.status, r.body)
		}
		if len(v.Effects) != 2 || v.Effects[0].Name != "make-pdf" || v.Effects[1].Name != "send-link" ||
			v.Effects[0].Key != "dossier_42:v5/make-pdf" || v.Effects[0].State != ledger.Prepared ||
			v.Effects[0].NextAt == nil || v.Effects[0].WaitsForOperator {
			t.Fatalf("effects: %+v", v.Effects)
		}
		for _, secret := range []string{"effect-secret", "private"} {
			if strings.Contains(r.body, secret) {
				t.Fatalf("the view shows an effect's %q: %s", secret, r.body)
			}
		}
		plain := e.do("GET", "/_idem/v1/operations?key=plain", "agent-token", "")
		if !strings.Contains(plain.body, `"effects":[]`) {
			t.Fatalf("an operation without effects: %s", plain.body)
		}
	})
}
