package reconcile_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/reconcile"
)

// BenchmarkReconcile is the reconciler's cost per unknown operation: its
// claim, its probe to a trivial upstream on loopback, and its verdict
// recorded, on each store (issue 13's measure). ns/op is per operation.
func BenchmarkReconcile(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"status":"captured"}`)
	}))
	defer up.Close()
	probe, err := reconcile.Compile(reconcile.Config{Probe: "GET /v1/x/{{.params.id}}",
		Applied: `body.status == "captured"`, NotApplied: `body.status == "requires_capture"`})
	if err != nil {
		b.Fatal(err)
	}
	client := &http.Client{}
	send := func(ctx context.Context, route, method, target string) (reconcile.Answer, error) {
		req, _ := http.NewRequestWithContext(ctx, method, up.URL+target, nil)
		resp, err := client.Do(req)
		if err != nil {
			return reconcile.Answer{}, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return reconcile.Answer{Status: resp.StatusCode, Header: resp.Header, Body: body}, err
	}
	dbtest.Each(b, func(b *testing.B, db dbtest.DB) {
		s := db.Open(b)
		b.StopTimer()
		for i := range b.N {
			r, err := s.Reserve(context.Background(), ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
				Tenant: "t", Key: fmt.Sprint("k-", i),
				Route: "POST /v1/x/{id}", Fingerprint: "sha256:aa", Lease: time.Hour, Retention: time.Hour,
				Actor: "b", Probe: fmt.Sprint("GET /v1/x/", i)})
			if err == nil {
				_, err = s.MarkUnknown(context.Background(), *r.Lease, ledger.Note{Reason: "lost"})
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		rc := &reconcile.Reconciler{Store: s, Probes: map[string]*reconcile.Probe{"POST /v1/x/{id}": probe},
			Send: send, Batch: 64}
		b.StartTimer()
		for done := 0; done < b.N; {
			n, err := rc.Once(context.Background())
			if err != nil || n == 0 {
				b.Fatalf("settled %d of %d: %v", done, b.N, err)
			}
			done += n
		}
	})
}
