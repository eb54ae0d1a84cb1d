package outbox_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/outbox"
)

// The relay's throughput, side by side in one run (issue 13's measure):
// effects delivered by the relay to a trivial target on loopback (claim,
// POST with the derived key, result recorded), against the same POSTs
// made by hand, eight at a time as the relay makes them. ns/op is per
// effect; effects/s is reported.

const benchConcurrency = 16

func trivialTarget(b *testing.B) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"ref-1"}`)
	}))
	b.Cleanup(srv.Close)
	return srv.URL
}

var benchClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchConcurrency}}

// BenchmarkByHand is the floor: the POSTs alone, no store.
func BenchmarkByHand(b *testing.B) {
	url := trivialTarget(b)
	body := []byte(`{"step":1}`)
	b.ResetTimer()
	var wg sync.WaitGroup
	next := make(chan int)
	for range benchConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				req, _ := http.NewRequest(http.MethodPost, url+"/v1/steps/1", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header["idempotency-key"] = []string{fmt.Sprint("acme:op-", i, "/step-1")}
				resp, err := benchClient.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	for i := range b.N {
		next <- i
	}
	close(next)
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "effects/s")
}

// BenchmarkRelay is the relay (Run) delivering b.N effects already
// enqueued, each its own operation's.
func BenchmarkRelay(b *testing.B) {
	dbtest.Each(b, func(b *testing.B, db dbtest.DB) {
		s := db.Open(b)
		url := trivialTarget(b)
		b.StopTimer()
		batch := make([]outbox.Effect, 0, 256)
		for i := range b.N {
			batch = append(batch, outbox.Effect{Tenant: "acme", OperationKey: fmt.Sprint("op-", i), Name: "step-1",
				Target: "crm", Path: "/v1/steps/1", Header: http.Header{"Content-Type": {"application/json"}},
				Body: []byte(`{"step":1}`)})
			if len(batch) == cap(batch) || i == b.N-1 {
				if _, err := outbox.Enqueue(context.Background(), s, batch...); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		var delivered atomic.Int64
		r := &outbox.Relay{Store: s, Targets: map[string]outbox.Target{"crm": {URL: url, ResultRef: "body:/id"}},
			Concurrency: benchConcurrency, Client: benchClient, OnDelivery: func(d outbox.Delivery) {
				if d.Recorded != nil || d.Outcome.State != ledger.Succeeded {
					b.Errorf("delivery %+v", d)
				}
				if delivered.Add(1) == int64(b.N) {
					cancel()
				}
			}}
		b.StartTimer()
		if err := r.Run(ctx); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "effects/s")
	})
}
