package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/metrics"
)

// TestHistoryPerTenant: each tenant's samples hold its own requests and
// its own store gauges, never another's; counters restart every interval.
func TestHistoryPerTenant(t *testing.T) {
	s := dbtest.SQLite(t)
	if _, err := s.Reserve(context.Background(), ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "globex", Key: "k", Route: "POST /v1/t",
		Fingerprint: "sha256:aa", Lease: time.Microsecond, Retention: time.Hour, Actor: "t"}); err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Options{Store: s, StatsTTL: time.Nanosecond})
	for range 3 {
		m.Request(keyed.Observation{Route: "POST /v1/t", Tenant: "acme", Outcome: keyed.OutcomeCreated,
			Created: true})
	}
	m.Request(keyed.Observation{Route: "POST /v1/t", Tenant: "acme", Outcome: keyed.OutcomeReplayed,
		Retry: keyed.RetryReplay})
	m.Resolved("acme", ledger.Succeeded, 90*time.Second, true)
	time.Sleep(time.Millisecond)
	now := time.Now()
	m.History().Sample(now)
	m.History().Sample(now.Add(10 * time.Second))
	acme := m.History().Since("acme", time.Hour, now.Add(10*time.Second))
	if len(acme) != 2 {
		t.Fatalf("acme: %d samples", len(acme))
	}
	want := [10]float64{3, 1, 1, 0, 0, 0, 90, 1, 1, 1}
	if acme[0].Values != want || acme[1].Values != ([10]float64{}) {
		t.Fatalf("acme's samples %v, want %v then zeros", acme, want)
	}
	globex := m.History().Since("globex", time.Hour, now.Add(10*time.Second))
	if len(globex) != 2 || globex[0].Values[4] != 1 || globex[0].Values[0] != 0 {
		t.Fatalf("globex's samples %v: want its stuck operation, none of acme's requests", globex)
	}
	if len(metrics.Indicators) != 10 {
		t.Fatalf("%d indicators", len(metrics.Indicators))
	}
}
