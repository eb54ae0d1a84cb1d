package metrics_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/metrics"
)

// fill reserves n operations in s, from 32 goroutines, half of them
// executing and half prepared, in two tenants.
func fill(b *testing.B, s ledger.Store, n int) {
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 32 {
				p := ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
					Tenant: fmt.Sprint("t", i%2), Key: fmt.Sprint("k-", i), Route: "POST /v1/t",
					Fingerprint: "sha256:aa", Retention: time.Hour, Actor: "bench"}
				if i%2 == 0 {
					p.Lease = time.Hour
				}
				if _, err := s.Reserve(context.Background(), p); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkScrape100k is one /metrics scrape, the store read included,
// with 100,000 operations in the store (issue 12's measure).
func BenchmarkScrape100k(b *testing.B) {
	dbtest.Each(b, func(b *testing.B, db dbtest.DB) {
		s := db.Open(b)
		fill(b, s, 100_000)
		m := metrics.New(metrics.Options{Store: s, StatsTTL: time.Nanosecond})
		h := m.Handler()
		for b.Loop() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			if rec.Code != 200 {
				b.Fatalf("scrape: %d", rec.Code)
			}
		}
	})
}

// BenchmarkObserve is what the metrics add to one request: the Observer's
// calls of a new key's path (its upstream call and its end).
func BenchmarkObserve(b *testing.B) {
	m := metrics.New(metrics.Options{})
	o := keyed.Observation{Route: "POST /v1/tickets", Tenant: "acme", Outcome: keyed.OutcomeCreated, Created: true,
		Duration: time.Millisecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Upstream("POST /v1/tickets", 201, time.Millisecond)
			m.Request(o)
		}
	})
}
