package reconcile_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/reconcile"
)

// TestStoredProbeIsCheckedBeforeItIsSent: a probe stored on an operation
// (by an older version, or written into the store by hand) is not
// trusted: one that leaves the template's path is never sent, and the
// operation waits for an operator, its audit event saying why.
func TestStoredProbeIsCheckedBeforeItIsSent(t *testing.T) {
	probe, err := reconcile.Compile(reconcile.Config{Probe: "GET /v1/refunds/{{.body.ref}}/status",
		Applied: "status == 200", NotApplied: "status == 404"})
	if err != nil {
		t.Fatal(err)
	}
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		store, ctx := db.Open(t), context.Background()
		stored := map[string]string{
			"climbs":  "GET /v1/refunds/map[/../../../internal/payroll?x=:1]/status",
			"elsewhr": "GET /internal/payroll",
			"writes":  "DELETE /v1/refunds/R-1/status",
		}
		for key, p := range stored {
			res, err := store.Reserve(ctx, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
				Tenant: "acme", Key: key, Route: "POST /v1/refunds",
				Fingerprint: "sha256:x", Lease: time.Minute, Retention: time.Hour, Actor: "gw", Probe: p})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.MarkUnknown(ctx, *res.Lease, ledger.Note{Reason: "lost"}); err != nil {
				t.Fatal(err)
			}
		}
		var sent, why []string
		// One worker: sent and why need no lock.
		r := &reconcile.Reconciler{Store: store, Probes: map[string]*reconcile.Probe{"POST /v1/refunds": probe},
			Concurrency: 1, Audit: func(e audit.Event) { why = append(why, e.Reason) },
			Send: func(_ context.Context, _, method, target string) (reconcile.Answer, error) {
				sent = append(sent, method+" "+target)
				return reconcile.Answer{Status: 200}, nil
			}}
		if n, err := r.Once(ctx); err != nil || n != 0 || len(sent) != 0 {
			t.Fatalf("settled %d (%v), sent %q", n, err, sent)
		}
		for _, reason := range why {
			if !strings.Contains(reason, "the stored probe request") || !strings.Contains(reason, "waits for an operator") {
				t.Errorf("the audit says %q", reason)
			}
		}
		cs, err := store.ClaimProbes(ctx, ledger.ProbeClaimParams{Routes: []string{"POST /v1/refunds"}, Limit: 9,
			Lease: time.Minute})
		if len(why) != len(stored) || len(cs) != 0 || err != nil {
			t.Fatalf("%d reasons, claimed again: %+v %v", len(why), cs, err)
		}
	})
}
