package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/inbox"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// TestConsumerDeliveriesAreKeyedWrites: a consumer's delivery goes
// through the gateway's keyed path, as a request would: the operation is
// the consumer's tenant's, under its route consumer:NAME (the metrics'
// label too), with its history; the upstream sees the key in the
// tenant's name and the consumer's path; a redelivery is replayed with
// nothing sent; another body under the key is a conflict, refused.
func TestConsumerDeliveriesAreKeyedWrites(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		up := newUpstream(t)
		path := filepath.Join(t.TempDir(), "gw.yaml")
		text := fmt.Sprintf(`store: %s
upstreams:
  ops: {url: %s, forward_key: true}
consumers:
  - {name: billing, tenant: acme, source: {nats: "nats://127.0.0.1:1", stream: S, consumer: c},
     key_from: body:/event_id, deliver: {upstream: ops, path: /v1/tickets}, dead_letter: {subject: dead}}
  - {name: lossy, tenant: acme, source: {nats: "nats://127.0.0.1:1", stream: S, consumer: c},
     deliver: {upstream: ops, path: /v1/lost}, dead_letter: {subject: dead}}
`, db.DSN, up.srv.URL)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.LoadConsumers(path)
		if err != nil {
			t.Fatal(err)
		}
		store := db.Open(t)
		s, err := server.New(cfg, store, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		d, ctx := s.Deliverer("billing"), context.Background()
		first, err := d.Deliver(ctx, inbox.Delivery{Key: "evt-1", Body: []byte(`{"event_id":"evt-1","amount":5}`)})
		if err != nil || first.State != ledger.Succeeded || first.Replayed || first.OpID == "" {
			t.Fatalf("first delivery: %+v %v", first, err)
		}
		again, err := d.Deliver(ctx, inbox.Delivery{Key: "evt-1", Body: []byte(`{"amount":5, "event_id":"evt-1"}`)})
		if err != nil || !again.Replayed || again.OpID != first.OpID {
			t.Fatalf("redelivery: %+v %v", again, err)
		}
		other, err := d.Deliver(ctx, inbox.Delivery{Key: "evt-1", Body: []byte(`{"event_id":"evt-1","amount":6}`)})
		if err != nil || other.Code != contract.CodeFingerprintMismatch || inbox.Decide(other).Verdict != inbox.Park {
			t.Fatalf("another body: %+v %v", other, err)
		}
		if n := up.count("/v1/tickets"); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
		// The consumer's namespace goes upstream with the key: never a
		// client's key evt-1, nor another consumer's.
		if key := up.lastHeaders().Get("Idempotency-Key"); key != "acme~consumer/billing~evt-1" {
			t.Fatalf("the upstream saw key %q", key)
		}
		op, err := store.Get(ctx, first.OpID)
		if err != nil || op.Tenant != "acme" || op.Route != "consumer:billing" || op.Key != "evt-1" ||
			op.Kind != ledger.KindConsumer || op.Namespace != ledger.ConsumerNamespace("billing") {
			t.Fatalf("operation %+v %v", op, err)
		}
		if h, err := store.History(ctx, op.ID); err != nil || len(h) == 0 {
			t.Fatalf("history %v %v", h, err)
		}
		// Applied, and the answer lost: unknown, which is acknowledged (it
		// waits for reconciliation in the ledger, not in the queue).
		lost, err := s.Deliverer("lossy").Deliver(ctx, inbox.Delivery{Key: "pay-1", Body: []byte(`{"amount":1}`)})
		if err != nil || lost.State != ledger.Unknown || inbox.Decide(lost).Verdict != inbox.Park {
			t.Fatalf("a lost answer: %+v %v", lost, err)
		}
		rec := httptest.NewRecorder()
		s.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		if !strings.Contains(string(body), `route="consumer:billing"`) {
			t.Fatalf("no series labelled with the consumer's route:\n%s", body)
		}
	})
}
